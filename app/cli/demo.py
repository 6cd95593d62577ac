"""``pavedock demo``: seed a running dock with a small real market, through its API.

Trains a few learnwares on real datasets (TF-IDF ONNX models and linear heads on MiniLM, a
LoRA adapter with ``--lora``), submits them as a developer, waits until they are indexed, then
posts a few-shot task from one dataset's test split as a user and prints the ranking.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from app.cli.common import DEFAULT_URL, Url, console, datasets_dir, print_matches
from app.cli.keys import create_key_in_db
from app.client import DockAPIError, DockClient

# (dataset, family): five small learnwares for five different tasks.
MARKET: list[tuple[str, str]] = [
    ("sst2", "tfidf"),
    ("ag_news", "linear"),
    ("trec", "tfidf"),
    ("sms_spam", "linear"),
    ("tweet_emotion", "tfidf"),
]
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


def _keys(url: str, admin_key: str | None) -> tuple[str, str]:
    if admin_key:
        with DockClient(url, admin_key) as admin:
            return (
                admin.create_key("developer", "demo developer").token,
                admin.create_key("user", "demo user").token,
            )
    return create_key_in_db("developer", "demo developer"), create_key_in_db("user", "demo user")


def run_demo(
    *, url: str, admin_key: str | None, datasets: Path | None, lora: bool, cache: Path, console: Console
) -> None:
    from app.ml.data import few_shot, load_task

    data = datasets_dir(datasets)
    with DockClient(url, None) as probe:
        try:
            ready = probe.ready()
        except Exception as exc:
            raise SystemExit(f"no dock at {url} ({exc}): start it first with `make run`") from exc
    if ready.get("status") != "ready":
        raise SystemExit(f"the dock at {url} is not ready: {json.dumps(ready.get('checks'))}")
    developer, user = _keys(url, admin_key)
    market = [*MARKET, LORA_ENTRY] if lora else MARKET
    cache.mkdir(parents=True, exist_ok=True)
    submitted: list[tuple[str, int, int]] = []
    with DockClient(url, developer) as dev:
        for name, family in market:
            console.print(f"training the {family} learnware for {name} …")
            package = build_learnware(data, name, family, cache / f"{name}-{family}.zip")
            try:
                sub = dev.submit(package)
            except DockAPIError as exc:
                console.print(f"[yellow]{name}: {exc.message}[/yellow]")
                continue
            submitted.append((f"{name}-{family}", sub.learnware_id, sub.job_id))
            console.print(f"  submitted as learnware {sub.learnware_id} (job {sub.job_id})")
        for label, learnware_id, job_id in submitted:
            job = dev.wait(job_id, timeout=1800)
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
        result = client.wait_task(posted.task_id, timeout=900)
    print_matches(result.matches)
    best = result.matches[0].learnware_id if result.matches else 1
    console.print(
        "\nTry it yourself:\n"
        f"  export PAVEDOCK_URL={url} PAVEDOCK_API_KEY={user}\n"
        f"  pavedock task {shlex.quote(str(shots))} --label-names {shlex.quote(','.join(query.label_names))} --local\n"
        f"  pavedock download {best} --out .\n"
        f"developer key (pavedock submit PACKAGE --key …): {developer}",
        soft_wrap=True,
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
    cache: Annotated[Path, typer.Option(help="where the trained demo packages are kept")] = Path(
        ".cache/pavedock/demo"
    ),
) -> None:
    """Seed a running dock with a small real market (trained on real datasets), then identify."""
    run_demo(url=url, admin_key=key, datasets=datasets, lora=lora, cache=cache, console=console)
