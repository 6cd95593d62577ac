"""``pavedock demo``: seed a running dock with a small real market, through its API.

Trains a few learnwares on real datasets (TF-IDF ONNX models and linear heads on MiniLM, a
LoRA adapter with ``--lora``), submits them as a developer, waits until they are indexed, then
posts a few-shot task from one dataset's test split as a user and prints the ranking.
``--market wide`` trains one learnware per text dataset instead (25 with the shared datasets):
a market where a user's task has many candidates of its number of classes, so the shot check runs
as many as it would in a real one (``pavedock bench tasks`` times it).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from app.cli.common import DEFAULT_URL, Url, console, datasets_dir, print_matches
from app.cli.keys import create_key_in_db
from app.cli.progress import progress_bar
from app.cli.where import pavedock_command
from app.client import DockAPIError, DockClient

if TYPE_CHECKING:
    from app.jobs.schemas import JobRead
    from app.ml.progress import Progress

# (dataset, family): five small learnwares for five different tasks.
MARKET: list[tuple[str, str]] = [
    ("sst2", "tfidf"),
    ("ag_news", "linear"),
    ("trec", "tfidf"),
    ("sms_spam", "linear"),
    ("tweet_emotion", "tfidf"),
]
MARKETS = ("small", "wide")
LORA_ENTRY = ("snips", "lora")
QUERY_TASK = "ag_news"
TRAIN_LIMIT = 2000


def register(app: typer.Typer) -> None:
    app.command("demo")(demo)


def build_learnware(datasets: Path, name: str, family: str, out: Path) -> Path:
    """Train one demo learnware (cached: an existing zip is reused)."""
    from app.bench import builders
    from app.ml.data import load_task

    if out.is_file():
        return out
    task = load_task(datasets, name, "train", limit=TRAIN_LIMIT, seed=0)
    trainers: dict[str, Callable[[], Path]] = {
        "tfidf": lambda: builders.train_tfidf_onnx_learnware(task, out),
        "linear": lambda: builders.train_linear_head_learnware(task, out, max_examples=TRAIN_LIMIT),
        "lora": lambda: builders.train_lora_learnware(task, out, steps=60),
    }
    return trainers[family]()


def market_entries(datasets: Path, market: str) -> list[tuple[str, str]]:
    """The (dataset, family) pairs of a demo market: ``small`` is `MARKET`; ``wide`` is one
    learnware per text dataset, linear heads on MiniLM and TF-IDF models in turn (half of the
    checked candidates are then transformers classifiers, the costlier kind to run)."""
    if market == "small":
        return list(MARKET)
    if market == "wide":
        from app.ml.data import text_task_names

        return [(name, ("linear", "tfidf")[i % 2]) for i, name in enumerate(text_task_names(datasets))]
    raise SystemExit(f"unknown market {market!r}: choose one of {', '.join(MARKETS)}")


def _keys(url: str, admin_key: str | None) -> tuple[str, str]:
    if admin_key:
        with DockClient(url, admin_key) as admin:
            return (
                admin.create_key("developer", "demo developer").token,
                admin.create_key("user", "demo user").token,
            )
    return create_key_in_db("developer", "demo developer"), create_key_in_db("user", "demo user")


def _job_bar(report: Progress) -> Callable[[JobRead], None]:
    """A job's progress (0..1, stage message) as a progress bar in percent."""

    def show(job: JobRead) -> None:
        report(round(job.progress * 100), 100, job.message[:40])

    return show


def run_demo(
    *,
    url: str,
    admin_key: str | None,
    datasets: Path | None,
    lora: bool,
    cache: Path,
    console: Console,
    market: str = "small",
) -> None:
    from app.ml.data import few_shot, load_task

    data = datasets_dir(datasets)
    with DockClient(url, None) as probe:
        try:
            ready = probe.ready()
        except Exception as exc:
            raise SystemExit(
                f"no dock at {url} ({type(exc).__name__}): start it with `make run` in the checkout; "
                "if it runs elsewhere or on another port, say where with --url or PAVEDOCK_URL "
                "(e.g. PAVEDOCK_URL=http://127.0.0.1:8100), or run both with the same PAVEDOCK_PORT"
            ) from exc
    if ready.get("status") != "ready":
        raise SystemExit(f"the dock at {url} is not ready: {json.dumps(ready.get('checks'))}")
    developer, user = _keys(url, admin_key)
    entries = market_entries(data, market)
    if lora:
        entries.append(LORA_ENTRY)
    cache.mkdir(parents=True, exist_ok=True)
    submitted: list[tuple[str, int, int]] = []
    with DockClient(url, developer) as dev:
        for name, family in entries:
            console.print(f"training the {family} learnware for {name} …")
            package = build_learnware(data, name, family, cache / f"{name}-{family}.zip")
            try:
                sub = dev.submit(package)
            except DockAPIError as exc:
                # A second demo on the same dock: its learnwares are there already (the dock
                # refuses the same weights twice), and the task below still finds them.
                console.print(f"[yellow]{name}: not submitted: {exc.message}[/yellow]", soft_wrap=True)
                continue
            submitted.append((f"{name}-{family}", sub.learnware_id, sub.job_id))
            console.print(f"  submitted as learnware {sub.learnware_id} (job {sub.job_id})")
        for label, learnware_id, job_id in submitted:
            with progress_bar(f"learnware {learnware_id} ({label})", unit="%") as report:
                job = dev.wait(job_id, timeout=1800, progress=_job_bar(report))
            state = "indexed" if job.state.value == "succeeded" else f"{job.state.value}: {job.error}"
            console.print(f"learnware {learnware_id} ({label}): {state}")
    query = few_shot(load_task(data, QUERY_TASK, "test"), per_class=8, seed=1)
    shots = cache / f"few-shot-{QUERY_TASK}.jsonl"
    shots.write_text(
        "".join(
            json.dumps({"text": t, "label": query.label_names[int(y)]}) + "\n"
            for t, y in zip(query.texts, query.labels, strict=True)
        )
    )
    console.print(f"posting a {len(query)}-shot task from the {QUERY_TASK} test split as a user …")
    with DockClient(url, user) as client:
        posted = client.task(query.texts, [int(y) for y in query.labels], query.label_names)
        with progress_bar(f"task {posted.task_id}", unit="%") as report:
            result = client.wait_task(posted.task_id, timeout=900, progress=_job_bar(report))
    print_matches(result.matches)
    best = result.matches[0].learnware_id if result.matches else 1
    cmd = pavedock_command()
    # Jobs are seen by the key that started them: suggest one of this developer's own.
    follow = f"  {cmd} jobs show {submitted[0][2]} --key {developer}\n" if submitted else ""
    names = shlex.quote(",".join(query.label_names))
    console.print(
        "\nThe demo made two keys of this dock (store them: they are shown once):\n"
        f"  developer  {developer}\n"
        "             submits packages and follows their jobs (the learnwares above are its own)\n"
        f"  user       {user}\n"
        "             posts tasks and downloads learnwares; the ranking above is its task\n"
        "Jobs and tasks are seen by the key that made them (and admins): another key gets 403 or 404.\n"
        "\nTry it yourself, as the demo user:\n"
        f"  export PAVEDOCK_URL={url} PAVEDOCK_API_KEY={user}\n"
        f"  {cmd} task {shlex.quote(str(shots))} --label-names {names} --local\n"
        f"  {cmd} download {best} --out .\n"
        "and as the demo developer:\n"
        f"{follow}"
        f"  {cmd} package --help   # your own model as a learnware: docs/packages.md",
        soft_wrap=True,
        highlight=False,
    )


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
    market: Annotated[
        str,
        typer.Option(help="small: five learnwares; wide: one per text dataset (25, ~10 min on a CPU)"),
    ] = "small",
    cache: Annotated[Path, typer.Option(help="where the trained demo packages are kept")] = Path(
        ".cache/pavedock/demo"
    ),
) -> None:
    """Seed a running dock with a small real market (trained on real datasets), then identify."""
    run_demo(
        url=url, admin_key=key, datasets=datasets, lora=lora, cache=cache, console=console, market=market
    )
