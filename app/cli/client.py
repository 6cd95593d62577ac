"""Client commands on ``DockClient``: ``submit``, ``learnwares``, ``task``, ``download``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from app.cli.common import (
    DEFAULT_URL,
    Key,
    Url,
    console,
    fail,
    label_names_option,
    open_client,
    print_matches,
    read_few_shot,
    wait_and_report,
)
from app.cli.progress import progress_bar


def register(app: typer.Typer) -> None:
    app.command("submit")(submit)
    app.command("learnwares")(learnwares)
    app.command("task")(task)
    app.command("download")(download)


def submit(
    package: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="the package zip")],
    spec: Annotated[
        Path | None,
        typer.Option(help="a spec computed locally (`pavedock spec --package`): its stem or .safetensors"),
    ] = None,
    wait: Annotated[bool, typer.Option("--wait/--no-wait", help="follow the job to its end")] = True,
    timeout: float = 1800.0,
    url: Url = DEFAULT_URL,
    key: Key = None,
) -> None:
    """Submit a learnware package (developer key); follows validation, spec and indexing."""
    from app.client import DockAPIError

    with open_client(url, key) as client:
        try:
            sub = client.submit(package, spec)
            console.print(f"learnware {sub.learnware_id} submitted; job {sub.job_id}")
            if wait:
                job = wait_and_report(client, sub.job_id, timeout)
                learnware = client.learnware(sub.learnware_id)
                console.print(
                    f"learnware {learnware.id}: {learnware.status.value} {learnware.status_reason or ''}"
                )
                if job.state.value != "succeeded":
                    raise typer.Exit(1)
        except DockAPIError as exc:
            fail(exc)


def learnwares(
    mine: bool = False,
    status: str | None = None,
    q: str | None = None,
    page: int = 1,
    limit: int = 20,
    url: Url = DEFAULT_URL,
    key: Key = None,
) -> None:
    """List learnwares."""
    from app.client import DockAPIError

    with open_client(url, key) as client:
        try:
            result = client.learnwares(mine=mine, status=status, q=q, page=page, limit=limit)
        except DockAPIError as exc:
            fail(exc)
            return
    table = Table("id", "name", "status", "format", "labels", "spec")
    for lw in result.items:
        spec = "" if lw.spec_recomputed is None else ("dock" if lw.spec_recomputed else "developer")
        table.add_row(
            str(lw.id), lw.name, lw.status.value, lw.model_format, ", ".join(lw.label_names)[:40], spec
        )
    console.print(table)
    p = result.pagination
    console.print(f"page {p.page} of {p.max_page}, {p.total_count} in all")


def task(
    few_shot: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help='JSONL of {"text", "label"}')],
    label_names: Annotated[str, typer.Option(help="comma-separated class names, or a labels.json path")],
    local: Annotated[
        bool, typer.Option("--local/--remote", help="fit the spec here and upload only the spec")
    ] = False,
    check: Annotated[
        bool,
        typer.Option(
            "--check/--no-check",
            help="with --local: run the top matches on your examples here, as the dock's worker would "
            "(their packages are downloaded; your examples still never leave this machine)",
        ),
    ] = True,
    top_k: int = 10,
    timeout: float = 900.0,
    as_json: Annotated[bool, typer.Option("--json", help="print the task with its matches as JSON")] = False,
    url: Url = DEFAULT_URL,
    key: Key = None,
) -> None:
    """Post a few-shot task and print the learnwares ranked for it."""
    from app.client import DockAPIError

    texts, labels = read_few_shot(few_shot)
    names = label_names_option(label_names)
    checked_here = None
    with open_client(url, key) as client:
        try:
            sub = client.task(texts, labels, names, top_k=top_k, local_spec=local)
            if as_json:
                client.wait(sub.job_id, timeout=timeout)
            else:
                where = " (spec computed here)" if local else ""
                console.print(f"task {sub.task_id} posted; job {sub.job_id}{where}")
                wait_and_report(client, sub.job_id, timeout)
            result = client.task_result(sub.task_id)
            if local and check and not result.error and result.matches:
                with progress_bar("checking matches on your examples, here", unit="learnware") as bar:
                    checked_here = client.check_here(result, texts, labels, progress=None if as_json else bar)
        except DockAPIError as exc:
            fail(exc)
            return
    if result.error:
        fail(RuntimeError(result.error))
    if checked_here is not None:
        result = result.model_copy(update={"matches": checked_here.matches})
    if as_json:
        typer.echo(result.model_dump_json(indent=2))
        return
    if checked_here is not None:
        console.print(
            f"shot check run here on your {len(texts)} examples: {len(checked_here.checked)} matches "
            "(the dock saw only your spec)"
        )
        for learnware_id, why in checked_here.skipped.items():
            console.print(f"  not checked: learnware {learnware_id}: {why}", highlight=False)
    print_matches(result.matches)


def download(
    learnware_id: int,
    out: Annotated[Path, typer.Option(help="file or folder to write to")] = Path(),
    url: Url = DEFAULT_URL,
    key: Key = None,
) -> None:
    """Download a learnware's package (sha256 checked)."""
    from app.client import DockAPIError

    with open_client(url, key) as client:
        try:
            path = client.download(learnware_id, out)
        except DockAPIError as exc:
            fail(exc)
            return
    console.print(f"wrote {path}")
