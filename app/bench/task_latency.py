"""How long a user waits for a few-shot task through the API: ``pavedock bench tasks``.

Against a running dock that already holds learnwares (``pavedock demo`` seeds one), a user key
posts few-shot tasks drawn from the test splits of real datasets, 8 shots per class, and waits for
each ranking: the wall time from the POST to a ready task covers the queue, fitting the task's
spec, the search and the shot check in the worker, and the polling of the client. Each task is
posted twice: with the dataset's own label names (the check runs `shot_check_k` candidates) and
with codes ("0", "1", …) that no learnware uses (it runs up to `shot_check_k_unnamed`); and once
as a spec only (``--spec-only``: the spec fitted on this machine, the examples kept here), where
the time covers that fit and, in the `cpu` queue's worker, the close matches' agreement check.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from app.bench.report import machine, md_table, percentile, write_json
from app.client import DockClient
from app.ml.data import few_shot, load_task

TASKS = ("ag_news", "sst2", "trec", "sms_spam", "tweet_emotion")


@dataclass
class Timing:
    task: str
    names: str
    seed: int
    shots: int
    seconds: float
    top1: str
    checked: int


def _one(
    client: DockClient, texts: list[str], labels: list[int], names: list[str], local_spec: bool = False
) -> tuple[float, Any]:
    started = time.perf_counter()
    posted = client.task(texts, labels, names, local_spec=local_spec)
    result = client.wait_task(posted.task_id, timeout=900)
    elapsed = time.perf_counter() - started
    if result.status.value != "ready":
        raise RuntimeError(f"task {posted.task_id} ended {result.status.value}: {result.error}")
    return elapsed, result


KINDS = ("own names", "codes", "spec only")


def run_task_latency(
    url: str,
    key: str,
    datasets: Path,
    out: Path,
    *,
    tasks: tuple[str, ...] = TASKS,
    seeds: int = 2,
    spec_only: bool = False,
) -> dict[str, Any]:
    """Post each of ``tasks`` (``seeds`` draws of 8 shots per class) under both kinds of names,
    and with ``spec_only`` once more as a spec fitted here under its own names."""
    timings: list[Timing] = []
    with DockClient(url, key) as client:
        for seed in range(seeds):
            for name in tasks:
                query = few_shot(load_task(datasets, name, "test"), per_class=8, seed=seed)
                labels = [int(y) for y in query.labels]
                posts = [
                    ("own names", list(query.label_names)),
                    ("codes", [str(i) for i in range(len(query.label_names))]),
                ]
                if spec_only:
                    posts.append(("spec only", list(query.label_names)))
                for kind, names in posts:
                    seconds, result = _one(
                        client, list(query.texts), labels, names, local_spec=kind == "spec only"
                    )
                    top = result.matches[0] if result.matches else None
                    timings.append(
                        Timing(
                            name,
                            kind,
                            seed,
                            len(query),
                            seconds,
                            top.name if top else "",
                            sum(1 for m in result.matches if m.checked or m.agreement is not None),
                        )
                    )
    by_kind: dict[str, dict[str, float]] = {}
    for kind in KINDS:
        values = [t.seconds for t in timings if t.names == kind]
        if not values:
            continue
        by_kind[kind] = {
            "tasks": len(values),
            "median_s": statistics.median(values),
            "p90_s": percentile(values, 90),
            "max_s": max(values),
        }
    result = {
        "benchmark": "task-latency",
        "url": url,
        "machine": machine(),
        "by_kind": by_kind,
        "timings": [asdict(t) for t in timings],
    }
    write_json(out, result)
    out.with_suffix(".md").write_text(render_markdown(result))
    return result


def render_markdown(result: dict[str, Any]) -> str:
    rows = [
        [kind, str(v["tasks"]), f"{v['median_s']:.2f}", f"{v['p90_s']:.2f}", f"{v['max_s']:.2f}"]
        for kind, v in result["by_kind"].items()
    ]
    return "\n".join(
        [
            "# Few-shot task latency through the API",
            "",
            f"Dock: {result['url']}; machine: {result['machine']['platform']}, "
            f"{result['machine']['cpus']} CPUs; date {result['machine']['date']}",
            "",
            md_table(["label names", "tasks", "median s", "p90 s", "max s"], rows),
            "",
        ]
    )
