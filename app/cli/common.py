"""What the command modules share: the console, the ``--url`` / ``--key`` options (also read
from ``PAVEDOCK_URL`` / ``PAVEDOCK_API_KEY``), the API client, reading few-shot files, printing
jobs and matches."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from app.cli.inputs import bad_input, read_jsonl_objects
from app.cli.where import URL_HELP, default_dock_url

if TYPE_CHECKING:
    from app.client import DockClient
    from app.jobs.schemas import JobRead

console = Console()

Url = Annotated[str, typer.Option("--url", envvar="PAVEDOCK_URL", help=URL_HELP)]
Key = Annotated[str | None, typer.Option("--key", envvar="PAVEDOCK_API_KEY", help="an API key (pdk_…)")]
DEFAULT_URL = default_dock_url()  # where `pavedock serve` listens with this environment


def open_client(url: str, key: str | None) -> DockClient:
    from app.client import DockClient

    if not key:
        raise typer.BadParameter("an API key is needed: --key or PAVEDOCK_API_KEY (`pavedock keys create`)")
    return DockClient(url, key)


def fail(exc: Exception) -> None:
    console.print(f"[red]{exc}[/red]")
    raise typer.Exit(1)


def print_job(job: JobRead) -> None:
    console.print(f"job {job.id} [{job.state.value}] {job.stage} {job.progress:.0%} {job.message}")


def wait_and_report(client: DockClient, job_id: int, timeout: float) -> JobRead:
    if sys.stderr.isatty():  # a bar in a terminal; one line per step in logs and pipes
        from app.cli.progress import progress_bar

        with progress_bar(f"job {job_id}", unit="%") as report:
            job = client.wait(
                job_id,
                timeout=timeout,
                progress=lambda j: report(round(j.progress * 100), 100, f"{j.stage} {j.message}"[:60]),
            )
        print_job(job)
        if job.state.value != "succeeded":
            console.print(f"[red]job {job.id} {job.state.value}: {job.error or job.message}[/red]")
        return job
    last = [-1.0]

    def show(job: JobRead) -> None:
        if job.progress != last[0] or job.state.value in ("succeeded", "failed", "cancelled"):
            last[0] = job.progress
            print_job(job)

    job = client.wait(job_id, timeout=timeout, progress=show)
    if job.state.value != "succeeded":
        console.print(f"[red]job {job.id} {job.state.value}: {job.error or job.message}[/red]")
    return job


def read_few_shot(path: Path) -> tuple[list[str], list[Any]]:
    texts, labels = [], []
    for number, row in read_jsonl_objects(path):
        if "text" not in row or "label" not in row:
            bad_input(f'{path} line {number}: need "text" and "label"')
        texts.append(str(row["text"]))
        labels.append(row["label"])
    return texts, labels


def label_names_option(value: str) -> list[str]:
    path = Path(value)
    if path.is_file():
        names = json.loads(path.read_text())
        return [str(n) for n in names]
    return [n.strip() for n in value.split(",") if n.strip()]


RANKING_ORDER = (
    "Order: matches checked on your examples that beat chance (by the log-probability they gave "
    "your labels, less a label map's cost, above a uniform guess's; the first five by that "
    "score plus how much they agree with one another on their declared inputs, κ); then the "
    "unchecked that "
    "answer your labels by name, by spec score (a task posted as a spec only: its close matches "
    "first, by how much they agree with one another on their declared inputs, κ); then the checked "
    "at chance, by their score; then "
    "the unchecked with other label names and no map, by spec score. Why each one is where it is:"
)


def _on_examples(
    shot: float | None, confidence: float | None, agreement: float | None, weighed: bool = False
) -> str:
    """The "on your examples" cell: the shot check's accuracy (and, where it weighed in on their
    order, the checked matches' agreement with one another, κ), or for a spec-only task's close
    matches their agreement with one another, or a dash."""
    if shot is not None:
        return (
            f"{shot:.0%}"
            + ("" if confidence is None else f" (p {confidence:.2f})")
            + (f"; κ {agreement:.2f}" if weighed and agreement is not None else "")
        )
    return "–" if agreement is None else f"not run; κ {agreement:.2f}"


def print_matches(matches: list[Any]) -> None:
    table = Table("rank", "learnware", "score", "on your examples", "name", "format", "labels")
    for m in matches:
        shot = getattr(m, "shot_accuracy", None)
        confidence = getattr(m, "shot_confidence", None)  # shown as p; the order is by log-probability
        label_map = getattr(m, "label_map", None)
        labels = (
            ", ".join(f"{k}→{v}" for k, v in label_map.items()) if label_map else ", ".join(m.label_names)
        )
        table.add_row(
            str(m.rank),
            str(m.learnware_id),
            f"{m.score:.4f}" + (" aligned" if getattr(m, "aligned", False) else ""),
            _on_examples(
                shot, confidence, getattr(m, "agreement", None), bool(getattr(m, "agreement_weighed", False))
            ),
            m.name,
            m.model_format,
            labels[:48],
        )
    console.print(table)
    reasons = [(m.rank, getattr(m, "reason", "")) for m in matches]
    if any(reason for _, reason in reasons):
        console.print(RANKING_ORDER, soft_wrap=True)
        for rank, reason in reasons:
            console.print(f"  {rank}. {reason}", highlight=False, soft_wrap=True)


def datasets_dir(explicit: Path | None = None) -> Path:
    """``--datasets``, else the settings' (``PAVEDOCK_DATASETS_DIR``, default ../shared/datasets)."""
    from app.settings import get_settings

    for candidate in (explicit, get_settings().datasets_dir):
        if candidate and Path(candidate).is_dir():
            return Path(candidate).resolve()
    raise typer.BadParameter("no datasets folder: pass --datasets or set PAVEDOCK_DATASETS_DIR")


def cache_dir(explicit: Path | None, name: str) -> Path:
    """``--cache``, else ``name`` under the settings' cache dir (``PAVEDOCK_CACHE_DIR``)."""
    from app.settings import get_settings

    path = explicit if explicit is not None else get_settings().cache_dir / name
    path.mkdir(parents=True, exist_ok=True)
    return path
