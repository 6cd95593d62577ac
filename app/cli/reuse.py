"""Reuse commands: merge learnwares, fine-tune one on your shots, transfer one to another base."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from app.client import DockClient

from app.cli.common import (
    DEFAULT_URL,
    Key,
    Url,
    console,
    label_names_option,
    open_client,
    read_few_shot,
    wait_and_report,
)
from app.cli.inputs import bad_input, read_jsonl_objects

Params = Annotated[
    str, typer.Option("--params", help='method parameters as JSON, e.g. \'{"alpha": 1.2, "pact": true}\'')
]
Wait = Annotated[bool, typer.Option("--wait/--no-wait", help="follow the job to its end")]
Name = Annotated[str | None, typer.Option("--name", help="the new learnware's name")]


def register(app: typer.Typer) -> None:
    app.command("merge")(merge)
    app.command("merge-methods")(merge_methods)
    app.command("finetune")(finetune)
    app.command("transfer")(transfer)
    app.command("reuse")(reuse)


def _params(value: str) -> dict[str, object]:
    try:
        params = json.loads(value)
    except ValueError as exc:
        raise typer.BadParameter(f"--params is not JSON: {exc}") from exc
    if not isinstance(params, dict):
        raise typer.BadParameter("--params must be a JSON object")
    return params


def _finish(client: DockClient, job_id: int, wait: bool) -> None:
    console.print(f"job {job_id} queued")
    if wait:
        job = wait_and_report(client, job_id, timeout=3600.0)
        if job.state.value != "succeeded":
            raise typer.Exit(1)
        console.print_json(data=job.result)


def merge_methods(url: Url = DEFAULT_URL, key: Key = None) -> None:
    """List the merge methods and their parameters."""
    with open_client(url, key) as client:
        for method in client.merge_methods():
            console.print(f"[bold]{method.name}[/bold]: {method.help}")
            for name, schema in method.params.get("properties", {}).items():
                console.print(
                    f"  {name}: {schema.get('description', '')} (default {schema.get('default')!r})"
                )


def merge(
    learnware_ids: Annotated[list[int], typer.Argument(help="two or more LoRA learnwares of one base")],
    method: Annotated[str, typer.Option("--method", help="see `pavedock merge-methods`")] = "iso_c",
    params: Params = "{}",
    name: Name = None,
    private: Annotated[
        bool | None,
        typer.Option("--private/--public", help="default: private for a user key, public for a developer's"),
    ] = None,
    wait: Wait = True,
    url: Url = DEFAULT_URL,
    key: Key = None,
) -> None:
    """Merge LoRA learnwares into a new learnware (registered, validated and indexed)."""
    from app.reuse.schemas import MergeCreate

    body = MergeCreate(
        learnware_ids=learnware_ids, method=method, params=_params(params), name=name, private=private
    )
    with open_client(url, key) as client:
        _finish(client, client.merge(body).job_id, wait)


def finetune(
    learnware_id: Annotated[int, typer.Argument(help="the LoRA learnware to start from")],
    few_shot: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help='JSONL of {"text", "label"}')],
    label_names: Annotated[str, typer.Option("--label-names", help="comma-separated, or a labels.json")],
    steps: Annotated[int, typer.Option(help="AdamW steps")] = 30,
    holdout: Annotated[float, typer.Option(help="share of the shots held out to measure")] = 0.25,
    name: Name = None,
    wait: Wait = True,
    url: Url = DEFAULT_URL,
    key: Key = None,
) -> None:
    """Fine-tune a learnware on your shots (PAVE♦) into your private learnware."""
    from app.reuse.schemas import FinetuneCreate

    texts, labels = read_few_shot(few_shot)
    body = FinetuneCreate(
        learnware_id=learnware_id,
        texts=texts,
        labels=labels,
        label_names=label_names_option(label_names),
        steps=steps,
        holdout=holdout,
        name=name,
    )
    with open_client(url, key) as client:
        _finish(client, client.finetune(body).job_id, wait)


def transfer(
    learnware_id: Annotated[int, typer.Argument(help="the LoRA learnware to move")],
    target_base: Annotated[str, typer.Argument(help="a registered base, e.g. all-mpnet-base-v2")],
    calibration: Annotated[
        Path, typer.Argument(exists=True, dir_okay=False, help='JSONL of {"text"} or {"text", "label"}')
    ],
    method: Annotated[
        str,
        typer.Option(
            "--method",
            help="bico, theseus, input_only, output_only, naive (a LoRA adapter), utd (a linear map after pooling)",
        ),
    ] = "bico",
    params: Params = "{}",
    name: Name = None,
    wait: Wait = True,
    url: Url = DEFAULT_URL,
    key: Key = None,
) -> None:
    """Move a LoRA learnware onto another base, calibrated on a few inputs."""
    from app.reuse.schemas import TransferCreate

    rows = []
    for number, row in read_jsonl_objects(calibration):
        if "text" not in row:
            bad_input(f'{calibration} line {number}: need "text"')
        rows.append(row)
    labelled = all("label" in row for row in rows)
    body = TransferCreate(
        learnware_id=learnware_id,
        target_base=target_base,
        method=method,
        params=_params(params),
        texts=[str(row["text"]) for row in rows],
        labels=[row["label"] for row in rows] if labelled else None,
        name=name,
    )
    with open_client(url, key) as client:
        _finish(client, client.transfer(body).job_id, wait)


def reuse(
    task_id: Annotated[int, typer.Argument(help="a task of yours whose learnwares are ranked")],
    few_shot: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help='JSONL of {"text", "label"}')],
    label_names: Annotated[str, typer.Option("--label-names", help="comma-separated, or a labels.json")],
    finetune: Annotated[
        bool, typer.Option("--finetune/--no-finetune", help="fine-tune the top adapter")
    ] = True,
    steps: Annotated[int, typer.Option(help="AdamW steps of the fine-tune")] = 30,
    merge_k: Annotated[int, typer.Option("--merge-k", help="merge the top k adapters (0: no merge)")] = 3,
    method: Annotated[
        str, typer.Option("--method", help="merge method, see `pavedock merge-methods`")
    ] = "iso_c",
    params: Params = "{}",
    holdout: Annotated[float, typer.Option(help="share of the shots held out to measure")] = 0.25,
    wait: Wait = True,
    url: Url = DEFAULT_URL,
    key: Key = None,
) -> None:
    """Identify, then reuse: fine-tune the task's top adapter and merge its top k (private
    learnwares), and compare them with the top-1 used as it is on held-out shots."""
    from app.reuse.schemas import TaskReuseCreate

    texts, labels = read_few_shot(few_shot)
    body = TaskReuseCreate(
        texts=texts,
        labels=labels,
        label_names=label_names_option(label_names),
        finetune=finetune,
        finetune_steps=steps,
        merge_k=merge_k,
        merge_method=method,
        merge_params=_params(params),
        holdout=holdout,
    )
    with open_client(url, key) as client:
        submitted = client.reuse_task(task_id, body)
        for reason in submitted.skipped:
            console.print(f"[yellow]skipped {reason}[/yellow]")
        parts = [(n, c) for n, c in (("fine-tune", submitted.finetune), ("merge", submitted.merge)) if c]
        for what, choice in parts:
            console.print(
                f"{what}: job {choice.job_id} from learnwares {choice.learnware_ids} (ranks {choice.ranks})"
            )
        if not wait:
            return
        rows: list[tuple[str, object]] = []
        failed = False
        for what, choice in parts:
            job = wait_and_report(client, choice.job_id, timeout=3600.0)
            if job.state.value != "succeeded" or job.result is None:
                failed = True
                continue
            if not rows:
                top1 = job.result.get("identified_accuracy", job.result.get("first_input_accuracy"))
                rows.append(
                    (
                        f"top adapter, learnware {choice.learnware_ids[0]} (rank {choice.ranks[0]}), as it is",
                        top1,
                    )
                )
            rows.append(
                (f"{what} → learnware {job.result['learnware_id']}", job.result.get("heldout_accuracy"))
            )
        for label, accuracy in rows:
            shown = f"{float(accuracy):.3f}" if isinstance(accuracy, int | float) else "–"
            console.print(f"  {label}: held-out accuracy {shown}")
        if failed:
            raise typer.Exit(1)
