"""Service commands: ``serve``, ``db``, ``keys``, and client commands on ``DockClient``
(``submit``, ``learnwares``, ``task``, ``jobs``, ``download``), ``demo`` and ``bench service``.

Client commands read ``--url`` / ``PAVEDOCK_URL`` and ``--key`` / ``PAVEDOCK_API_KEY``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from app.cli.quiet import explain_root, worker_env
from app.cli.where import URL_HELP, default_dock_url, forget_serve_url, record_serve_url, serve_url

if TYPE_CHECKING:
    from app.client import DockClient
    from app.jobs.schemas import JobRead

console = Console()

Url = Annotated[str, typer.Option("--url", envvar="PAVEDOCK_URL", help=URL_HELP)]
Key = Annotated[str | None, typer.Option("--key", envvar="PAVEDOCK_API_KEY", help="an API key (pdk_…)")]
DEFAULT_URL = default_dock_url()  # where `pavedock serve` listens with this environment

db_app = typer.Typer(no_args_is_help=True, help="The database schema (Alembic migrations).")
keys_app = typer.Typer(
    no_args_is_help=True, help="API keys, made directly in the database (first admin key)."
)
jobs_app = typer.Typer(no_args_is_help=True, help="Follow and manage jobs through the API.")


def register(app: typer.Typer) -> None:
    app.command("serve")(serve)
    app.add_typer(db_app, name="db")
    app.add_typer(keys_app, name="keys")
    app.command("submit")(submit)
    app.command("learnwares")(learnwares)
    app.command("task")(task)
    app.add_typer(jobs_app, name="jobs")
    app.command("download")(download)
    app.command("demo")(demo)
    _register_bench(app)


def _register_bench(app: typer.Typer) -> None:
    """Add ``bench service`` beside the ML benchmarks (``pavedock bench …``)."""
    for group in app.registered_groups:
        if group.name == "bench" and group.typer_instance is not None:
            group.typer_instance.command("service")(bench_service)
            return
    bench_app = typer.Typer(no_args_is_help=True, help="Benchmarks.")
    bench_app.command("service")(bench_service)
    app.add_typer(bench_app, name="bench")


def _client(url: str, key: str | None) -> DockClient:
    from app.client import DockClient

    if not key:
        raise typer.BadParameter("an API key is needed: --key or PAVEDOCK_API_KEY (`pavedock keys create`)")
    return DockClient(url, key)


def _fail(exc: Exception) -> None:
    console.print(f"[red]{exc}[/red]")
    raise typer.Exit(1)


def _print_job(job: JobRead) -> None:
    console.print(f"job {job.id} [{job.state.value}] {job.stage} {job.progress:.0%} {job.message}")


# ---- serve ------------------------------------------------------------------------------------


def _die_with_parent() -> None:
    """In the worker's process: get SIGTERM when ``pavedock serve`` dies, even by SIGKILL (Linux)."""
    if sys.platform.startswith("linux"):
        import ctypes
        import signal

        pr_set_pdeathsig = 1
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


class _EmbeddedWorker(threading.Thread):
    """The embedded Celery worker: started with the API, restarted if it dies, stopped with it."""

    def __init__(self, queues: str, concurrency: int):
        super().__init__(name="embedded-worker", daemon=True)
        self.command = [
            sys.executable, "-m", "celery", "-A", "workers.celery_app", "worker",
            "--queues", queues, "--concurrency", str(concurrency), "--loglevel", "INFO",
            "--hostname", "embedded@%h",
        ]  # fmt: skip
        self.proc: subprocess.Popen[bytes] | None = None
        self.stopping = threading.Event()

    def run(self) -> None:
        delay = 1.0
        while not self.stopping.is_set():
            started = time.monotonic()
            self.proc = subprocess.Popen(self.command, preexec_fn=_die_with_parent, env=worker_env())
            code = self.proc.wait()
            if self.stopping.is_set():
                return
            console.print(f"[yellow]worker exited with {code}; restarting in {delay:.0f} s[/yellow]")
            delay = 1.0 if time.monotonic() - started > 60 else min(30.0, delay * 2)
            self.stopping.wait(delay)

    def stop(self) -> None:
        self.stopping.set()
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def serve(
    host: Annotated[str | None, typer.Option(help="bind address (default: PAVEDOCK_HOST, 127.0.0.1)")] = None,
    port: Annotated[int | None, typer.Option(help="port (default: PAVEDOCK_PORT, 8000)")] = None,
    worker: Annotated[bool, typer.Option("--worker/--no-worker", help="start a Celery worker too")] = True,
    concurrency: Annotated[int | None, typer.Option(help="worker processes (default: settings)")] = None,
) -> None:
    """Run the dock: migrations, then the API (uvicorn) and one worker consuming both queues.

    Embedded defaults: SQLite, the local artifact store and a filesystem broker under ./var.
    Nothing is seeded: make a key with `pavedock keys create`, try `pavedock demo`.
    """
    import uvicorn

    from app.admin.flower import start_flower
    from app.db.migrate import upgrade
    from app.settings import get_settings

    settings = get_settings()
    settings.ensure_dirs()
    upgrade(settings.resolved_database_url)
    if not _admin_exists():
        console.print("no admin key yet: create one with [bold]pavedock keys create --role admin[/bold]")
    embedded = None
    if worker:
        explain_root(console)
        embedded = _EmbeddedWorker(settings.worker_queues, concurrency or settings.worker_concurrency)
        embedded.start()
    start_flower()
    bind, listen = host or settings.host, port or settings.port
    served = record_serve_url(settings.data_dir, serve_url(bind, listen))  # clients find it there
    try:
        uvicorn.run(
            "app.api.main:create_app",
            factory=True,
            host=bind,
            port=listen,
            log_level=os.environ.get("PAVEDOCK_LOG_LEVEL", "info").lower(),
        )
    finally:
        forget_serve_url(served)
        if embedded is not None:
            embedded.stop()


# ---- db and keys (direct database access) --------------------------------------------------------


@db_app.command("upgrade")
def db_upgrade(
    wait: Annotated[float, typer.Option(help="seconds to wait for the database to accept connections")] = 0.0,
) -> None:
    """Wait for the database (optionally), then apply every migration (the prestart step)."""
    from app.db.migrate import upgrade
    from app.db.session import Database
    from app.settings import get_settings

    settings = get_settings()
    settings.ensure_dirs()
    url = settings.resolved_database_url
    deadline = time.monotonic() + wait
    while True:
        db = Database(url)
        try:
            db.ping()
            break
        except Exception as exc:
            if time.monotonic() > deadline:
                _fail(exc)
            console.print(f"waiting for the database: {type(exc).__name__}")
            time.sleep(1.0)
        finally:
            db.dispose()
    upgrade(url)
    console.print("database at the latest migration")


@db_app.command("current")
def db_current() -> None:
    """The database's migration revision and the latest one."""
    from app.db.migrate import current_revision, head_revision
    from app.db.session import Database
    from app.settings import get_settings

    url = get_settings().resolved_database_url
    db = Database(url)
    try:
        console.print(f"current {current_revision(db.engine)}, head {head_revision(url)}")
    finally:
        db.dispose()


def _database() -> Any:
    from app.db.migrate import upgrade
    from app.db.session import Database
    from app.settings import get_settings

    settings = get_settings()
    settings.ensure_dirs()
    upgrade(settings.resolved_database_url)
    return Database(settings.resolved_database_url)


def _admin_exists() -> bool:
    from sqlalchemy import select

    from app.db.models import ApiKey, Role

    db = _database()
    try:
        with db.session() as session:
            return (
                session.scalar(
                    select(ApiKey.id).where(ApiKey.role == Role.admin, ApiKey.revoked_at.is_(None))
                )
                is not None
            )
    finally:
        db.dispose()


def create_key_in_db(role: str, name: str, expires_days: float | None = None) -> str:
    """Issue a key straight into the configured database; returns the token."""
    from datetime import timedelta

    from app.auth.service import create_key
    from app.db.models import Role

    db = _database()
    try:
        with db.session() as session:
            issued = create_key(
                session,
                role=Role(role),
                name=name,
                expires_in=timedelta(days=expires_days) if expires_days else None,
            )
            return issued.token
    finally:
        db.dispose()


@keys_app.command("create")
def keys_create(
    role: Annotated[str, typer.Option(help="developer, user or admin")],
    name: Annotated[str, typer.Option(help="who or what the key is for")] = "cli",
    expires_days: Annotated[float | None, typer.Option(help="days until it expires (default: never)")] = None,
) -> None:
    """Create a key in the database (how the first admin key is made); prints the token once."""
    if role not in ("developer", "user", "admin"):
        raise typer.BadParameter("role must be developer, user or admin")
    token = create_key_in_db(role, name, expires_days)
    console.print(f"{role} key created; store it now, it is not shown again:")
    typer.echo(token)


@keys_app.command("list")
def keys_list() -> None:
    """Keys in the database (prefixes and metadata; secrets are never stored)."""
    from app.auth.repository import list_keys

    db = _database()
    try:
        with db.session() as session:
            table = Table("id", "prefix", "role", "name", "created", "expires", "revoked")
            for key in list_keys(session):
                table.add_row(
                    str(key.id),
                    key.prefix,
                    key.role.value,
                    key.name,
                    f"{key.created_at:%Y-%m-%d %H:%M}",
                    f"{key.expires_at:%Y-%m-%d %H:%M}" if key.expires_at else "",
                    f"{key.revoked_at:%Y-%m-%d %H:%M}" if key.revoked_at else "",
                )
            console.print(table)
    finally:
        db.dispose()


@keys_app.command("revoke")
def keys_revoke(key_id: int) -> None:
    """Revoke a key by id."""
    from app.auth.service import revoke_key

    db = _database()
    try:
        with db.session() as session:
            key = revoke_key(session, key_id)
            console.print(f"key {key.prefix} revoked")
    finally:
        db.dispose()


# ---- client commands ------------------------------------------------------------------------------


def _wait_and_report(client: DockClient, job_id: int, timeout: float) -> JobRead:
    if sys.stderr.isatty():  # a bar in a terminal; one line per step in logs and pipes
        from app.cli.progress import progress_bar

        with progress_bar(f"job {job_id}", unit="%") as report:
            job = client.wait(
                job_id,
                timeout=timeout,
                progress=lambda j: report(round(j.progress * 100), 100, f"{j.stage} {j.message}"[:60]),
            )
        _print_job(job)
        if job.state.value != "succeeded":
            console.print(f"[red]job {job.id} {job.state.value}: {job.error or job.message}[/red]")
        return job
    last = [-1.0]

    def show(job: JobRead) -> None:
        if job.progress != last[0] or job.state.value in ("succeeded", "failed", "cancelled"):
            last[0] = job.progress
            _print_job(job)

    job = client.wait(job_id, timeout=timeout, progress=show)
    if job.state.value != "succeeded":
        console.print(f"[red]job {job.id} {job.state.value}: {job.error or job.message}[/red]")
    return job


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

    with _client(url, key) as client:
        try:
            sub = client.submit(package, spec)
            console.print(f"learnware {sub.learnware_id} submitted; job {sub.job_id}")
            if wait:
                job = _wait_and_report(client, sub.job_id, timeout)
                learnware = client.learnware(sub.learnware_id)
                console.print(
                    f"learnware {learnware.id}: {learnware.status.value} {learnware.status_reason or ''}"
                )
                if job.state.value != "succeeded":
                    raise typer.Exit(1)
        except DockAPIError as exc:
            _fail(exc)


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

    with _client(url, key) as client:
        try:
            result = client.learnwares(mine=mine, status=status, q=q, page=page, limit=limit)
        except DockAPIError as exc:
            _fail(exc)
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


def _read_few_shot(path: Path) -> tuple[list[str], list[Any]]:
    texts, labels = [], []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        row = json.loads(line)
        if "text" not in row or "label" not in row:
            raise typer.BadParameter(f'{path} line {number}: need "text" and "label"')
        texts.append(str(row["text"]))
        labels.append(row["label"])
    return texts, labels


def _label_names(value: str) -> list[str]:
    path = Path(value)
    if path.is_file():
        names = json.loads(path.read_text())
        return [str(n) for n in names]
    return [n.strip() for n in value.split(",") if n.strip()]


RANK_ORDER = (
    "order: label set (yours, then as many classes, then the rest), then accuracy on your examples "
    "where checked (ties: p, the mean probability of the true labels), then score (the spec's cosine)"
)


def print_matches(matches: list[Any]) -> None:
    table = Table("rank", "learnware", "score", "on your examples", "name", "format", "labels")
    for m in matches:
        shot = getattr(m, "shot_accuracy", None)
        confidence = getattr(m, "shot_confidence", None)
        label_map = getattr(m, "label_map", None)
        labels = (
            ", ".join(f"{k}→{v}" for k, v in label_map.items()) if label_map else ", ".join(m.label_names)
        )
        table.add_row(
            str(m.rank),
            str(m.learnware_id),
            f"{m.score:.4f}",
            "–" if shot is None else f"{shot:.0%}" + ("" if confidence is None else f" (p {confidence:.2f})"),
            m.name,
            m.model_format,
            labels[:48],
        )
    console.print(table)
    console.print(RANK_ORDER, style="dim", soft_wrap=True)


def task(
    few_shot: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help='JSONL of {"text", "label"}')],
    label_names: Annotated[str, typer.Option(help="comma-separated class names, or a labels.json path")],
    local: Annotated[
        bool, typer.Option("--local/--remote", help="fit the spec here and upload only the spec")
    ] = False,
    top_k: int = 10,
    timeout: float = 900.0,
    as_json: Annotated[bool, typer.Option("--json", help="print the task with its matches as JSON")] = False,
    url: Url = DEFAULT_URL,
    key: Key = None,
) -> None:
    """Post a few-shot task and print the learnwares ranked for it."""
    from app.client import DockAPIError

    texts, labels = _read_few_shot(few_shot)
    with _client(url, key) as client:
        try:
            sub = client.task(texts, labels, _label_names(label_names), top_k=top_k, local_spec=local)
            if as_json:
                client.wait(sub.job_id, timeout=timeout)
            else:
                where = " (spec computed here)" if local else ""
                console.print(f"task {sub.task_id} posted; job {sub.job_id}{where}")
                _wait_and_report(client, sub.job_id, timeout)
            result = client.task_result(sub.task_id)
        except DockAPIError as exc:
            _fail(exc)
            return
    if result.error:
        _fail(RuntimeError(result.error))
    if as_json:
        typer.echo(result.model_dump_json(indent=2))
        return
    print_matches(result.matches)


@jobs_app.command("show")
def jobs_show(job_id: int, log: bool = True, url: Url = DEFAULT_URL, key: Key = None) -> None:
    """A job's state, progress, log, result or error."""
    from app.client import DockAPIError

    with _client(url, key) as client:
        try:
            job = client.job(job_id)
        except DockAPIError as exc:
            _fail(exc)
            return
    _print_job(job)
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

    with _client(url, key) as client:
        try:
            job = _wait_and_report(client, job_id, timeout)
        except DockAPIError as exc:
            _fail(exc)
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

    with _client(url, key) as client:
        try:
            page = client.jobs(state=state, kind=kind, limit=limit)
        except DockAPIError as exc:
            _fail(exc)
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

    with _client(url, key) as client:
        try:
            _print_job(client.cancel(job_id))
        except DockAPIError as exc:
            _fail(exc)


@jobs_app.command("retry")
def jobs_retry(job_id: int, url: Url = DEFAULT_URL, key: Key = None) -> None:
    """Retry a failed or cancelled job (admin key)."""
    from app.client import DockAPIError

    with _client(url, key) as client:
        try:
            _print_job(client.retry(job_id))
        except DockAPIError as exc:
            _fail(exc)


def download(
    learnware_id: int,
    out: Annotated[Path, typer.Option(help="file or folder to write to")] = Path(),
    url: Url = DEFAULT_URL,
    key: Key = None,
) -> None:
    """Download a learnware's package (sha256 checked)."""
    from app.client import DockAPIError

    with _client(url, key) as client:
        try:
            path = client.download(learnware_id, out)
        except DockAPIError as exc:
            _fail(exc)
            return
    console.print(f"wrote {path}")


# ---- demo and bench ---------------------------------------------------------------------------------


def demo(
    datasets: Annotated[
        Path | None, typer.Option(help="datasets folder (default: ../shared/datasets)")
    ] = None,
    url: Url = DEFAULT_URL,
    key: Annotated[
        str | None,
        typer.Option(
            "--key", envvar="PAVEDOCK_ADMIN_KEY", help="an admin key (default: make keys in the local DB)"
        ),
    ] = None,
    lora: Annotated[bool, typer.Option(help="add a LoRA learnware (a few minutes more on a CPU)")] = False,
    cache: Annotated[Path, typer.Option(help="where the trained demo packages are kept")] = Path(
        ".cache/pavedock/demo"
    ),
) -> None:
    """Seed a running dock with a small real market (trained on real datasets), then identify."""
    from app.cli.demo import run_demo

    run_demo(url=url, admin_key=key, datasets=datasets, lora=lora, cache=cache, console=console)


def bench_service(
    sizes: Annotated[str, typer.Option(help="comma-separated index sizes")] = "1000,100000",
    clients: Annotated[str, typer.Option(help="comma-separated concurrent client counts")] = "1,4,16",
    requests: Annotated[int, typer.Option(help="requests per (size, clients) point")] = 200,
    out: Annotated[Path, typer.Option(help="JSON results; a Markdown table is written beside it")] = Path(
        "bench-out/service.json"
    ),
) -> None:
    """Identification through the API (uvicorn + HTTP) at several index sizes and client counts."""
    from app.bench.service import run_service_benchmark

    run_service_benchmark(
        sizes=[int(s) for s in sizes.split(",")],
        clients=[int(c) for c in clients.split(",")],
        requests=requests,
        out=out,
        console=console,
    )
