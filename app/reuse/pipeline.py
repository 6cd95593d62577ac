"""Reuse jobs in workers: fetch the input adapters, run the ML core, and register the result as
a new learnware (which then goes through the usual validation and spec fitting).

Registering the new learnware and finishing the job happen in one transaction, so a worker
killed mid-job leaves either nothing (the job is re-run) or both.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from app.db.models import ApiKey, Job, Learnware
from app.errors import InvalidInput, InvalidPackage
from app.jobs import service as jobs
from app.jobs.runner import JobContext
from app.learnwares.service import submit
from app.ml.packages import extract_package

MAX_DECLARED_INPUTS = 256


@dataclass(frozen=True)
class _Input:
    id: int
    name: str
    license: str
    tags: list[str]
    adapter_dir: Path
    """The package's model: an adapter folder, or a sequence classifier's directory."""
    inputs: list[str]
    label_names: list[str]


def _params(ctx: JobContext) -> dict[str, Any]:
    with ctx.runtime.db.session() as session:
        job = session.get(Job, ctx.claim.job_id)
        if job is None or not job.params:
            raise InvalidInput(f"job {ctx.claim.job_id} has no parameters")
        return dict(job.params)


@contextmanager
def _scratch(ctx: JobContext) -> Iterator[Path]:
    folder = ctx.runtime.settings.scratch_dir
    folder.mkdir(parents=True, exist_ok=True)
    path = Path(tempfile.mkdtemp(prefix=f"job-{ctx.claim.job_id}-", dir=folder))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _fetch(ctx: JobContext, scratch: Path, learnware_id: int) -> _Input:
    """Extract a learnware's package (checked again, as every package the dock opens)."""
    with ctx.runtime.db.session() as session:
        learnware = session.get(Learnware, learnware_id)
        if learnware is None:
            raise InvalidPackage(f"learnware {learnware_id} no longer exists")
        sha, name, names = learnware.package_sha256, learnware.name, list(learnware.label_names)
        license, tags = learnware.license or "unknown", list(learnware.tags)
    folder = scratch / f"in-{learnware_id}"
    folder.mkdir()
    zip_path = ctx.runtime.store.fetch(sha, folder / "package.zip")
    package = extract_package(zip_path, folder / "package", ctx.runtime.settings.package_limits())
    return _Input(learnware_id, name, license, tags, package.model_path, list(package.inputs), names)


def _interleave(lists: list[list[str]], limit: int) -> list[str]:
    """Declared inputs of the new learnware: the inputs' own, taken in turn, without repeats."""
    out: dict[str, None] = {}
    for row in range(max((len(x) for x in lists), default=0)):
        for texts in lists:
            if row < len(texts):
                out.setdefault(texts[row])
            if len(out) >= limit:
                return list(out)
    return list(out)


def lineage(kind: str, params: dict[str, Any]) -> dict[str, Any]:
    """Where a reuse job's learnware came from: the job's kind (``merge``, ``finetune``,
    ``transfer``), the learnwares it started from, and for a transfer the base it moved to."""
    sources = params.get("learnware_ids") or [params["learnware_id"]]
    out: dict[str, Any] = {"kind": kind.removeprefix("reuse."), "from": [int(i) for i in sources]}
    for key in ("method", "target_base"):
        if params.get(key):
            out[key] = params[key]
    return out


def _register(
    ctx: JobContext, zip_path: Path, params: dict[str, Any], result: dict[str, Any], message: str
) -> None:
    with ctx.runtime.db.session() as session:
        owner = session.get(ApiKey, ctx.owner_id) if ctx.owner_id is not None else None
        if owner is None:
            raise InvalidInput("the key that asked for this job no longer exists")
        learnware, ingest = submit(
            session, ctx.runtime, owner, zip_path, None, private=bool(params["private"])
        )
        learnware.lineage = lineage(ctx.kind, params)
        jobs.succeed(
            session,
            ctx.claim,
            result={**result, "learnware_id": learnware.id, "ingest_job_id": ingest.id},
            message=f"{message}; registered as learnware {learnware.id} (validation and spec: job {ingest.id})",
        )


def merge(ctx: JobContext) -> None:
    """Merge the LoRA learnwares and register the merged adapter."""
    from app.ml.reuse import HeldOut, merge_lora_learnwares

    params = _params(ctx)
    with _scratch(ctx) as scratch:
        ctx.progress(0.02, "fetching the learnwares", force=True)
        inputs = [_fetch(ctx, scratch, i) for i in params["learnware_ids"]]
        if params.get("format", "peft-lora") == "hf-seqcls":
            _merge_full(ctx, params, scratch, inputs)
            return
        shots = params.get("eval")
        held = (
            HeldOut([], np.zeros(0, np.int64), shots["texts"], np.asarray(shots["labels"])) if shots else None
        )
        result = merge_lora_learnwares(
            [x.adapter_dir for x in inputs],
            params["base"],
            params["method"],
            params["params"],
            scratch / "merged",
            eval_names=shots["label_names"] if shots else list(params["label_names"]),
            eval_shots=held,
            progress=ctx.scaled(0.1, 0.8, f"merging with {params['method']}"),
        )
        ctx.log(
            f"merged {len(inputs)} adapters with {params['method']} in {result.seconds:.1f} s (rank {result.details['rank']})"
        )
        _register_merge(
            ctx,
            params,
            inputs,
            result.adapter_dir,
            "peft-lora",
            list(params["label_names"]),
            {
                "rank": result.details["rank"],
                "merge_seconds": round(result.seconds, 3),
                "heldout_accuracy": result.heldout_accuracy,
                "first_input_accuracy": result.baseline_accuracy,
            },
        )


def _merge_full(ctx: JobContext, params: dict[str, Any], scratch: Path, inputs: list[_Input]) -> None:
    """Merge full fine-tunes (sequence classifiers of one base) and register the merged model."""
    from app.ml.merging.full import merge_full_with_eval

    shots = params.get("eval") or {}
    result = merge_full_with_eval(
        [x.adapter_dir for x in inputs],
        [x.label_names for x in inputs],
        params["base"],
        params["method"],
        params["params"],
        scratch / "merged",
        eval_texts=shots.get("texts", []),
        eval_labels=shots.get("labels", []),
        eval_names=shots.get("label_names", []),
        progress=ctx.scaled(0.1, 0.8, f"merging with {params['method']}"),
    )
    stats = result.stats
    ctx.log(
        f"merged {len(inputs)} full fine-tunes with {params['method']} in {result.seconds:.1f} s "
        f"({stats.merged} tensors merged, {stats.averaged} averaged, {stats.unchanged} unchanged)"
    )
    _register_merge(
        ctx,
        params,
        inputs,
        scratch / "merged",
        "hf-seqcls",
        result.label_names,
        {
            "merge_seconds": round(result.seconds, 3),
            "heldout_accuracy": result.heldout_accuracy,
            "first_input_accuracy": result.first_input_accuracy,
        },
    )


def _register_merge(
    ctx: JobContext,
    params: dict[str, Any],
    inputs: list[_Input],
    model_dir: Path,
    model_format: Literal["peft-lora", "hf-seqcls"],
    label_names: list[str],
    result: dict[str, Any],
) -> None:
    """Package a merged model (the inputs' declared inputs, licences and tags) and register it."""
    from app.ml.reuse import package_model

    ctx.progress(0.85, "packaging the merged learnware", force=True)
    zip_path = package_model(
        model_dir,
        model_dir.with_suffix(".zip"),
        model_format=model_format,
        name=params["name"],
        description=f"{params['method']} merge of the {model_format} learnwares {params['learnware_ids']}",
        label_names=label_names,
        base=params["base"],
        inputs=_interleave([x.inputs for x in inputs], MAX_DECLARED_INPUTS),
        license=", ".join(sorted({x.license for x in inputs})),
        tags=sorted({t for x in inputs for t in x.tags} | {"merged"}),
    )
    summary = {"method": params["method"], "format": model_format, **result}
    _register(ctx, zip_path, params, summary, f"merged {len(inputs)} learnwares")


def finetune(ctx: JobContext) -> None:
    """Fine-tune a LoRA learnware on the user's shots (PAVE♦) and register the result."""
    from app.ml.reuse import finetune_lora_learnware, package_model

    params = _params(ctx)
    with _scratch(ctx) as scratch:
        ctx.progress(0.02, "fetching the learnware", force=True)
        source = _fetch(ctx, scratch, params["learnware_id"])
        result = finetune_lora_learnware(
            source.adapter_dir,
            params["base"],
            params["texts"],
            params["labels"],
            params["label_names"],
            scratch / "tuned",
            steps=params["steps"],
            holdout=params["holdout"],
            seed=params["seed"],
            progress=ctx.scaled(0.1, 0.85, "fine-tuning"),
        )
        ctx.log(
            f"fine-tuned on {result.details['n_train']} shots in {result.seconds:.1f} s; held-out accuracy "
            f"{result.baseline_accuracy} as it was, {result.heldout_accuracy} fine-tuned"
        )
        zip_path = package_model(
            result.adapter_dir,
            scratch / "tuned.zip",
            model_format="peft-lora",
            name=params["name"],
            description=f"learnware {source.id} fine-tuned on {result.details['n_train']} shots",
            label_names=list(params["label_names"]),
            base=params["base"],
            inputs=list(dict.fromkeys(params["texts"] + source.inputs))[:MAX_DECLARED_INPUTS],
            license=source.license,
            tags=sorted({*source.tags, "fine-tuned"}),
        )
        _register(
            ctx,
            zip_path,
            params,
            {
                "heldout_accuracy": result.heldout_accuracy,
                "identified_accuracy": result.baseline_accuracy,
                **result.details,
            },
            "fine-tuned",
        )


def transfer(ctx: JobContext) -> None:
    """Move a LoRA learnware onto the target base and register the result: a LoRA adapter of
    the target (BiCo family), or UTD's operator folded into a linear map after the target's
    pooling (``pooled-linear``)."""
    from app.ml.reuse import package_model
    from app.ml.transfer import transfer_learnware

    params = _params(ctx)
    with _scratch(ctx) as scratch:
        ctx.progress(0.02, "fetching the learnware", force=True)
        source = _fetch(ctx, scratch, params["learnware_id"])
        result = transfer_learnware(
            params["method"],
            source.adapter_dir,
            params["source_base"],
            params["target_base"],
            params["texts"],
            params["labels"],
            params["label_names"],
            params["params"],
            progress=ctx.scaled(0.05, 0.85, f"transferring with {params['method']}"),
        )
        out = result.save(scratch / "transferred")
        ctx.log(
            f"transferred with {params['method']} in {result.seconds:.1f} s on {result.n_calibration} inputs"
        )
        model_format: Literal["peft-lora", "pooled-linear"] = (
            "peft-lora" if result.kind == "adapter" else "pooled-linear"
        )
        how = "" if result.kind == "adapter" else " (its operator folded into a linear map after pooling)"
        zip_path = package_model(
            out,
            scratch / "transferred.zip",
            model_format=model_format,
            name=params["name"],
            description=f"learnware {source.id} moved from {params['source_base']} to {params['target_base']} "
            f"with {params['method']}{how}",
            label_names=list(params["label_names"]),
            base=params["target_base"],
            inputs=source.inputs,
            license=source.license,
            tags=sorted({*source.tags, "transferred"}),
        )
        _register(
            ctx,
            zip_path,
            params,
            {
                "method": params["method"],
                "format": model_format,
                "transfer_seconds": round(result.seconds, 3),
                "stats": result.stats,
            },
            f"transferred to {params['target_base']}",
        )
