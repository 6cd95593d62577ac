"""``pavedock jobs``: follow and manage jobs through the API."""

from __future__ import annotations

import json

import typer
from rich.table import Table

from app.cli.common import DEFAULT_URL, Key, Url, console, fail, open_client, print_job, wait_and_report

jobs_app = typer.Typer(no_args_is_help=True, help="Follow and manage jobs through the API.")


def register(app: typer.Typer) -> None:
    app.add_typer(jobs_app, name="jobs")


@jobs_app.command("show")
def jobs_show(job_id: int, log: bool = True, url: Url = DEFAULT_URL, key: Key = None) -> None:
    """A job's state, progress, log, result or error."""
    from app.client import DockAPIError

    with open_client(url, key) as client:
        try:
            job = client.job(job_id)
        except DockAPIError as exc:
            fail(exc)
            return
    print_job(job)
    if job.error:
        console.print(f"[red]error: {job.error}[/red]")
    if log:
        for line in job.log:
            console.print(f"  {line}")
    if job.result:
        console.print_json(json.dumps(job.result))


@jobs_app.command("wait")
def jobs_wait(job_id: int, timeout: float = 1800.0, url: Url = DEFAULT_URL, key: Key = None) -> None:
    """Follow a job's progress (server-sent events) until it ends."""
    from app.client import DockAPIError

    with open_client(url, key) as client:
        try:
            job = wait_and_report(client, job_id, timeout)
        except DockAPIError as exc:
            fail(exc)
            return
    if job.state.value != "succeeded":
        raise typer.Exit(1)


@jobs_app.command("list")
def jobs_list(
    state: str | None = None,
    kind: str | None = None,
    limit: int = 30,
    url: Url = DEFAULT_URL,
    key: Key = None,
) -> None:
    """Jobs, newest first (admin key)."""
    from app.client import DockAPIError

    with open_client(url, key) as client:
        try:
            page = client.jobs(state=state, kind=kind, limit=limit)
        except DockAPIError as exc:
            fail(exc)
            return
    table = Table("id", "kind", "stage", "state", "progress", "attempts", "message")
    for job in page.items:
        table.add_row(
            str(job.id),
            job.kind,
            job.stage,
            job.state.value,
            f"{job.progress:.0%}",
            str(job.attempts),
            job.message[:60],
        )
    console.print(table)


@jobs_app.command("cancel")
def jobs_cancel(job_id: int, url: Url = DEFAULT_URL, key: Key = None) -> None:
    """Cancel a queued or running job."""
    from app.client import DockAPIError

    with open_client(url, key) as client:
        try:
            print_job(client.cancel(job_id))
        except DockAPIError as exc:
            fail(exc)


@jobs_app.command("retry")
def jobs_retry(job_id: int, url: Url = DEFAULT_URL, key: Key = None) -> None:
    """Retry a failed or cancelled job (admin key)."""
    from app.client import DockAPIError

    with open_client(url, key) as client:
        try:
            print_job(client.retry(job_id))
        except DockAPIError as exc:
            fail(exc)
