"""The identification benchmark over several markets: each kind's figures with their spread.

`pavedock bench identify --market-seed N` builds another market of the same tasks (other model
families, training and corruption seeds). A rule chosen on one market is a guess until it holds
on another, so the figures the dock reports are the mean over market seeds with the standard
deviation over them beside it, and the worst market and worst kind next to the mean
(BENCHMARK.md). This module reads the runs' JSON files and writes that table; it trains and
ranks nothing itself, so it is cheap to rerun as runs land.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from app.bench.report import md_table, write_json

MEASURES = ("oracle_agreement_at1", "normalized_accuracy", "quality_filter")
"""The measures the targets name, in the order the tables show them."""

TARGETS = {"oracle_agreement_at1": 0.85, "normalized_accuracy": 0.97, "quality_filter": 0.97}
"""Issue 15's targets on every kind and on the mean over kinds."""

SPEC_ONLY_TARGET = 0.95
"""Spec-only users' normalised accuracy target (they have no examples to check candidates on)."""

HEADLINE = "mean over kinds"


class MarketsMismatch(ValueError):
    """The runs cannot be combined: another profile or space, or one market seed twice."""


def load_runs(paths: Sequence[Path]) -> list[dict[str, Any]]:
    """The runs' JSON files (`pavedock bench identify --out`), checked to be combinable."""
    runs = [json.loads(Path(p).read_text()) for p in paths]
    check_combinable(runs)
    return runs


def check_combinable(runs: Sequence[dict[str, Any]]) -> None:
    """One profile, one spec space, distinct market seeds, and the per-kind table in each."""
    if len(runs) < 2:
        raise MarketsMismatch("combine at least two runs (two market seeds) to report a spread")
    for run in runs:
        if "kinds" not in run or HEADLINE not in run["kinds"]:
            raise MarketsMismatch(
                f"run {run.get('command', '?')!r} has no per-kind table (is it an identify run?)"
            )
    seeds = [int(r.get("market_seed", 0)) for r in runs]
    if len(set(seeds)) != len(seeds):
        raise MarketsMismatch(f"market seeds repeat: {seeds}")
    for key in ("space_id",):
        values = {r[key] for r in runs}
        if len(values) > 1:
            raise MarketsMismatch(f"runs of different {key}: {sorted(values)}")
    profiles = {r["profile"]["name"] for r in runs}
    if len(profiles) > 1:
        raise MarketsMismatch(f"runs of different profiles: {sorted(profiles)}")
    tasks = {_tasks(r["profile"]["tasks"]) for r in runs}
    if len(tasks) > 1:
        raise MarketsMismatch("runs of different task lists: " + "; ".join(sorted(tasks)))


def _tasks(tasks: Sequence[str] | None) -> str:
    """A run's task list as a page names it: the full profile's is every task of the datasets
    folder (``None`` in its JSON)."""
    return "every task of the datasets folder" if tasks is None else ", ".join(tasks)


def _finite(values: Sequence[float]) -> list[float]:
    return [v for v in values if v is not None and not math.isnan(v)]


def combine(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per kind and measure: each market's value, their mean, the standard deviation over market
    seeds and the worst market; plus, per measure, the worst kind of the mean and whether every
    kind meets its target."""
    check_combinable(runs)
    order = sorted(range(len(runs)), key=lambda i: int(runs[i].get("market_seed", 0)))
    runs = [runs[i] for i in order]
    seeds = [int(r.get("market_seed", 0)) for r in runs]
    kinds = [*dict.fromkeys(k for r in runs for k in r["kinds"] if k != HEADLINE), HEADLINE]
    table: dict[str, dict[str, Any]] = {}
    for kind in kinds:
        row: dict[str, Any] = {"users": [int(r["kinds"].get(kind, {}).get("users", 0)) for r in runs]}
        for measure in MEASURES:
            per_market = [float(r["kinds"].get(kind, {}).get(measure, math.nan)) for r in runs]
            present = _finite(per_market)
            row[measure] = {
                "per_market": per_market,
                "mean": float(np.mean(present)) if present else math.nan,
                "spread": float(np.std(present)) if len(present) > 1 else math.nan,
                "worst": float(min(present)) if present else math.nan,
            }
        table[kind] = row
    verdict: dict[str, Any] = {}
    for measure in MEASURES:
        means = {k: table[k][measure]["mean"] for k in kinds if k != HEADLINE}
        means = {k: v for k, v in means.items() if not math.isnan(v)}
        worst_kind = min(means, key=lambda k: means[k]) if means else None
        verdict[measure] = {
            "target": TARGETS[measure],
            "headline": table[HEADLINE][measure]["mean"],
            "worst_kind": worst_kind,
            "worst_kind_mean": means.get(worst_kind, math.nan) if worst_kind else math.nan,
            "kinds_short": sorted(k for k, v in means.items() if v < TARGETS[measure]),
        }
    spec_only = table.get("spec only", {}).get("normalized_accuracy", {}).get("mean", math.nan)
    verdict["spec_only_normalized_accuracy"] = {"target": SPEC_ONLY_TARGET, "mean": spec_only}
    checked_here = [r.get("spec_only_checked_here") or {} for r in runs]
    local = [float(c.get("normalized_accuracy", math.nan)) for c in checked_here]
    if present := _finite(local):
        verdict["spec_only_checked_here_normalized_accuracy"] = {
            "target": SPEC_ONLY_TARGET,
            "per_market": local,
            "mean": float(np.mean(present)),
        }
    return {
        "benchmark": "identification-markets",
        "market_seeds": seeds,
        "profile": runs[0]["profile"]["name"],
        "tasks": runs[0]["profile"]["tasks"],
        "space_id": runs[0]["space_id"],
        "runs": [
            {"market_seed": s, "command": r.get("command"), "date": r["machine"]["date"]}
            for s, r in zip(seeds, runs, strict=True)
        ],
        "kinds": table,
        "verdict": verdict,
    }


def _cell(entry: dict[str, Any]) -> str:
    mean, spread = entry["mean"], entry["spread"]
    if math.isnan(mean):
        return "–"
    return f"{mean:.3f}" if math.isnan(spread) else f"{mean:.3f} ± {spread:.3f}"


def _markets(entry: dict[str, Any]) -> str:
    return " / ".join("–" if math.isnan(v) else f"{v:.3f}" for v in entry["per_market"])


def render_markdown(combined: dict[str, Any]) -> str:
    seeds = ", ".join(map(str, combined["market_seeds"]))
    header = ["kind of user task", "users per market"]
    for name in ("oracle agreement@1", "normalised accuracy", "quality filter"):
        header += [name, "per market"]
    rows = []
    for kind, row in combined["kinds"].items():
        cells: list[object] = [
            f"**{kind}**" if kind == HEADLINE else kind,
            " / ".join(map(str, row["users"])),
        ]
        for measure in MEASURES:
            cells += [_cell(row[measure]), _markets(row[measure])]
        rows.append(cells)
    verdict = combined["verdict"]
    lines = [
        f"# Identification over market seeds {seeds} ({combined['profile']} profile)",
        "",
        f"Tasks: {_tasks(combined['tasks'])}; space `{combined['space_id']}`. Each run:",
        "",
        *[f"- market seed {r['market_seed']}: `{r['command']}` ({r['date']})" for r in combined["runs"]],
        "",
        "As the service ranks (tiers by what a learnware can answer, cosine, the shot check). "
        "Each cell: the mean over market seeds ± the standard deviation over them, then each "
        "market's value in seed order. The headline is the mean over kinds.",
        "",
        md_table(header, rows),
        "",
        "Against the targets (every kind and the mean over kinds):",
        "",
    ]
    for measure, name in zip(
        MEASURES, ("oracle agreement@1", "normalised accuracy", "quality filter"), strict=True
    ):
        v = verdict[measure]
        short = "; ".join(v["kinds_short"]) or "none"
        lines.append(
            f"- {name} ≥ {v['target']:.2f}: mean over kinds {v['headline']:.3f}; worst kind "
            f"{v['worst_kind']} ({v['worst_kind_mean']:.3f}); kinds short of it: {short}."
        )
    spec = verdict["spec_only_normalized_accuracy"]
    lines.append(f"- spec-only users' normalised accuracy ≥ {spec['target']:.2f}: {spec['mean']:.3f}.")
    local = verdict.get("spec_only_checked_here_normalized_accuracy")
    if local is not None:
        lines.append(
            f"- spec-only users checked on their own machine (`pavedock task --local`; not a kind "
            f"of the mean): {local['mean']:.3f} ({_markets(local)} per market)."
        )
    return "\n".join(lines) + "\n"


def write_combined(paths: Sequence[Path], out: Path) -> dict[str, Any]:
    """Combine the runs at ``paths``; write ``out`` (JSON) and its Markdown page beside it."""
    combined = combine(load_runs(paths))
    write_json(out, combined)
    out.with_suffix(".md").write_text(render_markdown(combined))
    return combined
