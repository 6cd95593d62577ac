"""``pavedock serve``: migrations, then the API (uvicorn) and an embedded Celery worker that is
restarted if it dies and stopped with the API, and Flower on loopback."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from typing import Annotated

import typer

from app.children import die_with_parent
from app.cli.common import console
from app.cli.database import admin_exists
from app.cli.quiet import explain_root, worker_env
from app.cli.where import forget_serve_url, record_serve_url, serve_url


def register(app: typer.Typer) -> None:
    app.command("serve")(serve)


def _exit_on_sigterm(signum: int, frame: object) -> None:
    """SIGTERM (``kill``, ``docker stop``, systemd) ends ``pavedock serve`` as Ctrl-C does: through
    its ``finally`` and ``atexit``, so nothing it started is left running."""
    raise SystemExit(128 + signum)


class _EmbeddedWorker(threading.Thread):
    """The embedded Celery worker: started with the API, restarted if it dies, stopped with it."""

    def __init__(self, queues: str, concurrency: int):
        super().__init__(name="embedded-worker", daemon=True)
        self.command = [
            sys.executable, "-m", "celery", "-A", "workers.main", "worker",
            "--queues", queues, "--concurrency", str(concurrency), "--loglevel", "INFO",
            "--hostname", "embedded@%h",
        ]  # fmt: skip
        self.proc: subprocess.Popen[bytes] | None = None
        self.stopping = threading.Event()

    def run(self) -> None:
        delay = 1.0
        while not self.stopping.is_set():
            started = time.monotonic()
            self.proc = subprocess.Popen(self.command, preexec_fn=die_with_parent, env=worker_env())
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
    if not admin_exists():
        console.print("no admin key yet: create one with [bold]pavedock keys create --role admin[/bold]")
    embedded = None
    if worker:
        explain_root(console)
        embedded = _EmbeddedWorker(settings.worker_queues, concurrency or settings.worker_concurrency)
        embedded.start()
    start_flower(settings, log_path=settings.data_dir / "flower.log")
    bind, listen = host or settings.host, port or settings.port
    served = record_serve_url(settings.data_dir, serve_url(bind, listen))  # clients find it there
    # uvicorn shuts down on SIGTERM, then raises it again under the handler it found: Python's
    # default would end the process there, before the worker, Flower and the URL file are seen to.
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    try:
        uvicorn.run(
            "app.main:create_app",
            factory=True,
            host=bind,
            port=listen,
            log_level=(settings.log_level or "info").lower(),
        )
    finally:
        forget_serve_url(served)
        if embedded is not None:
            embedded.stop()
