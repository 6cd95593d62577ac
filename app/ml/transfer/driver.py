"""``transfer_learnware``, the single entry point of a transfer (methods: ``registry.py``): it
reads the learnware's adapter, pseudo-labels the calibration texts with the learnware when no
labels are given, runs the method and returns a ``TransferResult`` that saves either a peft
LoRA adapter for the target base (BiCo family) or a post-pooling UTD operator, saved both as
it is and folded into the ``pooled-linear`` map W = I + α Xᵀ that the dock packages and runs.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast, get_args

import torch
from safetensors.torch import load_file, save_file

from app.ml.adapters import save_lora_adapter
from app.ml.bases import resolve_base
from app.ml.encoders import Encoder, embed_texts, load_encoder
from app.ml.errors import InvalidInput, InvalidPackage
from app.ml.head import LabelNameHead, check_label_names
from app.ml.pooled_linear import fold_operator, save_linear
from app.ml.progress import Progress
from app.ml.transfer.bico import (
    MODE_SIDES,
    BicoMode,
    CrossStats,
    Statistic,
    collect_cross_stats,
    layer_pairs,
    transfer_task_vector,
)
from app.ml.transfer.registry import OutputKind, get_method
from app.ml.transfer.taskvec import (
    TaskVector,
    UnsupportedPair,
    check_task_vector,
    linear_modules,
    load_lora_task_vector,
    merged_deltas,
    module_map,
)
from app.ml.transfer.utd import UTDOperator, operator_from_features

TRANSFER_META = "transfer.json"
OPERATOR_WEIGHTS = "utd_operator.safetensors"


@dataclass
class TransferResult:
    """A transferred learnware: LoRA deltas for the target base, or a UTD operator."""

    method: str
    kind: OutputKind
    source_base_sha256: str
    target_base: str
    target_base_sha256: str
    target_model_type: str
    label_names: list[str]
    params: dict[str, Any]
    n_calibration: int
    pseudo_labelled: bool
    seconds: float
    rank: int = 0
    deltas: dict[str, torch.Tensor] = field(default_factory=dict)
    """Target module path → ΔW_B with α applied (adapter kind)."""
    operator: UTDOperator | None = None
    stats: dict[str, Any] = field(default_factory=dict)

    def meta(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "kind": self.kind,
            "source_base_sha256": self.source_base_sha256,
            "target_base": self.target_base,
            "target_base_sha256": self.target_base_sha256,
            "target_model_type": self.target_model_type,
            "label_names": self.label_names,
            "params": self.params,
            "n_calibration": self.n_calibration,
            "pseudo_labelled": self.pseudo_labelled,
            "seconds": round(self.seconds, 3),
            "rank": self.rank,
            "alpha": self.operator.alpha if self.operator is not None else self.params.get("alpha"),
            "stats": self.stats,
        }

    def save(self, out_dir: Path) -> Path:
        """Write a peft adapter (adapter kind), or ``utd_operator.safetensors`` and its folded
        ``linear.safetensors`` (operator kind), plus ``transfer.json``."""
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        if self.kind == "adapter":
            errors = save_lora_adapter(out_dir, self.deltas, self.rank, self.target_base)
            self.stats["refactorisation_error_max"] = max(errors.values(), default=0.0)
        else:
            assert self.operator is not None
            save_file({"matrix": self.operator.matrix.float().contiguous()}, str(out_dir / OPERATOR_WEIGHTS))
            save_linear(out_dir, fold_operator(self.operator))
        (out_dir / TRANSFER_META).write_text(json.dumps(self.meta(), indent=2, sort_keys=True))
        return out_dir


def load_utd_operator(folder: Path) -> UTDOperator:
    """Read an operator saved by ``TransferResult.save``."""
    folder = Path(folder)
    weights, meta_path = folder / OPERATOR_WEIGHTS, folder / TRANSFER_META
    if not weights.is_file() or not meta_path.is_file():
        raise InvalidPackage(f"{folder} holds no UTD operator ({OPERATOR_WEIGHTS}, {TRANSFER_META})")
    meta = json.loads(meta_path.read_text())
    return UTDOperator(load_file(str(weights))["matrix"], float(meta["alpha"]))


def base_model_type(base: str | Path) -> str:
    """The architecture of a base from its config, without loading weights."""
    config = json.loads((resolve_base(base) / "config.json").read_text())
    return str(config.get("model_type", ""))


def check_pair(source_type: str, target_type: str) -> None:
    """UnsupportedPair unless both architectures have a module map."""
    for side, model_type in (("source", source_type), ("target", target_type)):
        try:
            module_map(model_type)
        except UnsupportedPair as exc:
            raise UnsupportedPair(
                f"cannot transfer {source_type!r} → {target_type!r}: {side} {exc}"
            ) from None


def learnware_features(
    encoder: Encoder, tv: TaskVector, texts: Sequence[str], *, max_tokens: int = 128
) -> torch.Tensor:
    """Pooled features of ``texts`` through the base with the learnware's update merged in."""
    with merged_deltas(encoder.model, encoder.model_type, tv.deltas):
        return embed_texts(encoder, texts, max_tokens=max_tokens)


def pseudo_labels(features: torch.Tensor, head: LabelNameHead) -> list[int]:
    return [int(i) for i in head.logits(features).argmax(dim=-1).tolist()]


def _bico_mode(method: str) -> BicoMode:
    for mode in get_args(BicoMode):
        if mode == method:
            return cast(BicoMode, mode)
    raise InvalidInput(f"method {method!r} is not a BiCo mode")


def _statistics(mode: BicoMode) -> list[Statistic]:
    return [s for s in MODE_SIDES[mode] if s is not None]


def transfer_learnware(
    method: str,
    source_adapter_dir: Path,
    source_base: str | Path,
    target_base: str | Path,
    calib_texts: Sequence[str],
    calib_labels: Sequence[int] | None,
    label_names: Sequence[str],
    params: Mapping[str, Any] | None = None,
    progress: Progress | None = None,
) -> TransferResult:
    """Move a LoRA learnware of ``source_base`` onto ``target_base`` with ``method``.

    Without ``calib_labels``, the learnware's own predictions on ``calib_texts`` (through the
    label-name head over ``label_names``) are the labels, as for a model vector.
    """
    spec = get_method(method)
    p = spec.resolve_params(params)
    names = check_label_names(label_names)
    src_type, tgt_type = base_model_type(source_base), base_model_type(target_base)
    check_pair(src_type, tgt_type)
    started = time.perf_counter()

    def report(stage: int, message: str) -> None:
        if progress:
            progress(stage, 4, message)

    report(0, "loading bases")
    source = load_encoder(source_base, fresh=True)
    target = load_encoder(target_base, fresh=True)
    tv = load_lora_task_vector(Path(source_adapter_dir), src_type)
    check_task_vector(tv, source.model)
    texts = list(calib_texts)
    head_src = LabelNameHead.from_names(source, names, p["temperature"])
    needs_learnware = spec.output == "operator" or (spec.uses_labels and calib_labels is None)
    f_ft = learnware_features(source, tv, texts, max_tokens=p["max_tokens"]) if needs_learnware else None
    labels: list[int] | None = list(calib_labels) if calib_labels is not None else None
    pseudo = False
    if labels is None and f_ft is not None:
        labels, pseudo = pseudo_labels(f_ft, head_src), True
    report(1, "calibration")
    common: dict[str, Any] = {
        "method": method,
        "source_base_sha256": source.sha256,
        "target_base": str(target_base),
        "target_base_sha256": target.sha256,
        "target_model_type": tgt_type,
        "label_names": names,
        "params": p,
        "n_calibration": len(texts),
        "pseudo_labelled": pseudo,
    }
    if spec.output == "operator":
        assert f_ft is not None
        f_pre = embed_texts(source, texts, max_tokens=p["max_tokens"])
        g_src = head_src.embeddings
        g_tgt = LabelNameHead.from_names(target, names, p["temperature"]).embeddings
        f_tgt = embed_texts(target, texts, max_tokens=p["max_tokens"])
        report(2, "solving the operator")
        op, u = operator_from_features(
            f_ft, f_pre, g_src, f_tgt, g_tgt, alpha=p["alpha"], mu_f_rel=p["mu_f_rel"], mu_g_rel=p["mu_g_rel"]
        )
        report(4, "done")
        return TransferResult(
            kind="operator",
            seconds=time.perf_counter() - started,
            operator=op,
            stats={"descriptor_norm": float(u.norm()), "probes": len(texts), "prompts": len(names)},
            **common,
        )

    mode = _bico_mode(method)
    pairs = layer_pairs(tv, source.num_layers, target.num_layers, tgt_type, p["layers"])
    stats: CrossStats | None = None
    statistics = _statistics(mode)
    if statistics:
        if "grad_out" in statistics and labels is None:
            raise InvalidInput(f"method {method!r} needs calibration labels or a learnware to pseudo-label")
        stats = collect_cross_stats(
            source,
            target,
            pairs,
            texts,
            labels if labels is not None else [0] * len(texts),
            names,
            statistics=statistics,
            alignment=p["alignment"],
            batch_size=p["batch_size"],
            max_tokens=p["max_tokens"],
            temperature=p["temperature"],
            progress=progress,
        )[-1]
    report(3, "aligning")
    target_shapes = {
        key: module.weight.shape
        for key, module in linear_modules(target.model, tgt_type, [pr.target for pr in pairs]).items()
    }
    tv_b, _ = transfer_task_vector(tv, pairs, target_shapes, mode, stats, tgt_type, p["alpha"])
    report(4, "done")
    return TransferResult(
        kind="adapter",
        seconds=time.perf_counter() - started,
        rank=p["rank"] or tv_b.rank,  # k·r where k source layers fold into one
        deltas=tv_b.module_deltas(),
        stats={
            "layer_pairs": len(pairs),
            "calibration_rows": stats.rows if stats else 0,
            "source_norm": float(sum(d.double().pow(2).sum() for d in tv.deltas.values()) ** 0.5),
            "target_norm": float(sum(d.double().pow(2).sum() for d in tv_b.deltas.values()) ** 0.5),
        },
        **common,
    )
