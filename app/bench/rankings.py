"""Every user's whole ranking, kept for replays: what a rule that reorders the checked matches
would have given, on every kind of user task, in seconds rather than a full run.

`pavedock bench identify --rankings FILE` writes one JSON line per user (`ranking_record`): each
match as the service ranked it (the first `SHOWN`, and every checked one), with its spec cosine,
its shot score on the user's examples and what it is made of, and its test accuracy on the user's
classes read through the label map the dock chose; the best accuracy any learnware gives the user
by name (the oracle); and the answers of the first `PEERS` checked matches better than chance on
their pooled declared inputs, through their maps (what an agreement score is computed from).

`pavedock bench identify-replay FILE... --rule NAME...` reorders each user's matches by the named
rules (`RULES`) and prints each kind's normalised accuracy, oracle agreement and quality filter,
the mean over kinds and how many users moved. The base rule, `service`, gives back the recorded
order, and `replay_metrics` on it gives the run's own figures (the identification page checks
this on the runs it publishes). A replay moves only what was recorded: a rule that would check
other matches, or fit the spec otherwise, needs a run.

Why: ranking rules were chosen on replays of three kinds and then lost on the kinds the replay
left out (docs/benchmarks/identification.md, "Ties the examples cannot break"). A replay of every
kind on every market is the check a rule needs before a full run.
"""

from __future__ import annotations

import gzip
import json
import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from app.ml.agreement import MIN_PEERS, agreement_scores, mapped_answers, pooled_inputs
from app.ml.label_maps import Tier, map_by_name, tier_of
from app.ml.ranking import SHOT_CHECK_K

if TYPE_CHECKING:
    from app.bench.identification_kinds import Market, User
    from app.ml.ranking import Ranked

SHOWN = 25
"""How many of a user's matches a record keeps besides the checked ones (ids only after that)."""

PEERS = SHOT_CHECK_K
"""How many checked matches better than chance a record keeps the declared-input answers of."""

Record = dict[str, Any]
Rule = Callable[[Record], list[dict[str, Any]]]


def ranking_record(market: Market, user: User, ranked: Sequence[Ranked]) -> Record:
    """One user's ranking as the service ranked it, with what a replay needs (module docstring)."""
    from app.bench.identification_kinds import true_names, user_accuracy

    truth = true_names(market, user)
    serving = [
        user_accuracy(market, user, lw.id, map_by_name(truth, lw.label_names))
        for lw in market.learnwares
        if lw.id not in user.exclude and tier_of(truth, lw.label_names) == Tier.BY_NAME
    ]
    rows: list[dict[str, Any]] = []
    for position, r in enumerate(ranked):
        if position >= SHOWN and not r.checked:
            rows.append({"id": r.id})
            continue
        shot = r.shot
        rows.append(
            {
                "id": r.id,
                "key": market.learnwares[r.id].key,
                "cosine": round(float(r.score), 6),
                "tier": r.tier.slug,
                "checked": r.checked,
                "beats_chance": r.beats_chance,
                "map_how": None if r.label_map is None else r.label_map.how,
                "accuracy": user_accuracy(market, user, r.id, r.label_map),
                "shot": None
                if shot is None
                else {
                    "score": shot.score,
                    "log_likelihood": shot.log_likelihood,
                    "accuracy": shot.accuracy,
                    "confidence": shot.confidence,
                    "map_cost": shot.map_cost,
                },
            }
        )
    peers = [r for r in ranked if r.checked and r.beats_chance and r.label_map is not None][:PEERS]
    answered: dict[str, list[int]] = {}
    if len(peers) >= MIN_PEERS:
        texts = pooled_inputs([market.learnwares[r.id].inputs for r in peers])
        for r in peers:
            assert r.label_map is not None
            predicted = market.predict(market.learnwares[r.id], texts)
            answered[str(r.id)] = mapped_answers(predicted.labels, predicted.probs, r.label_map).tolist()
    own = {lw.variant: lw.id for lw in market.learnwares if lw.task == user.task}
    return {
        "kind": user.kind,
        "task": user.task,
        "seed": user.seed,
        "n_labels": len(user.shots.label_names),
        "n_examples": len(user.shots.texts),
        "oracle_by_name": max(serving) if serving else None,
        "good": own.get("good"),
        "corrupted": own.get("corrupted"),
        "ranked": rows,
        "peer_answers": answered,
    }


def read_records(paths: Iterable[Path]) -> list[Record]:
    """The records of one or more `--rankings` files (gzipped where the name ends in .gz), in order."""
    records: list[Record] = []
    for path in paths:
        text = (
            gzip.decompress(path.read_bytes()).decode() if path.suffix == ".gz" else path.read_text("utf-8")
        )
        records.extend(json.loads(line) for line in text.splitlines() if line.strip())
    return records


def replay_metrics(record: Record, order: Sequence[dict[str, Any]]) -> tuple[float, float, float]:
    """Normalised accuracy, oracle agreement@1 and quality filter of ``order`` for this user, as
    `identification_kinds.measure` computes them (NaN where they do not apply)."""
    top = order[0]
    accuracy = float(top.get("accuracy", 0.0))
    position = {row["id"]: i for i, row in enumerate(order)}
    good, bad = record["good"], record["corrupted"]
    quality = float(position[good] < position[bad]) if good in position and bad in position else math.nan
    if record["oracle_by_name"] is None:
        return math.nan, math.nan, quality
    oracle = max(float(record["oracle_by_name"]), accuracy)
    if oracle <= 0:
        return math.nan, math.nan, quality
    return accuracy / oracle, float(accuracy >= oracle - 0.01), quality


def peer_kappas(record: Record) -> dict[int, float]:
    """Each recorded peer's mean κ with the others (`app.ml.agreement.agreement_scores`)."""
    answered = {int(i): np.asarray(a, dtype=np.int64) for i, a in record["peer_answers"].items()}
    return agreement_scores(answered, int(record["n_labels"]))


def _better_than_chance(record: Record) -> list[dict[str, Any]]:
    return [row for row in record["ranked"] if row.get("checked") and row.get("beats_chance")]


def service(record: Record) -> list[dict[str, Any]]:
    """The order the service gave."""
    return list(record["ranked"])


def agreement_added(weight: float = 1.0) -> Rule:
    """The first `PEERS` checked matches better than chance by their shot score plus ``weight`` ×
    their κ with one another (one without a κ at the others' mean); the rest as recorded."""

    def rule(record: Record) -> list[dict[str, Any]]:
        checked = _better_than_chance(record)
        kappas = peer_kappas(record)
        if len(checked) < 2 or not kappas or checked[0] is not record["ranked"][0]:
            return service(record)
        head = checked[:PEERS]
        neutral = float(np.mean(list(kappas.values())))
        ordered = sorted(
            head, key=lambda row: row["shot"]["score"] + weight * kappas.get(row["id"], neutral), reverse=True
        )
        moved = {row["id"] for row in head}
        return ordered + [row for row in record["ranked"] if row["id"] not in moved]

    return rule


def shot_key(key: Callable[[dict[str, Any]], float]) -> Rule:
    """The checked matches better than chance ordered by ``key`` of their shot."""

    def rule(record: Record) -> list[dict[str, Any]]:
        checked = _better_than_chance(record)
        if len(checked) < 2 or checked[0] is not record["ranked"][0]:
            return service(record)
        ordered = sorted(checked, key=lambda row: key(row["shot"]), reverse=True)
        moved = {row["id"] for row in checked}
        return ordered + [row for row in record["ranked"] if row["id"] not in moved]

    return rule


def best_checked(record: Record) -> list[dict[str, Any]]:
    """The ceiling of any reordering of the checked matches: the one with the best test accuracy
    first (hindsight, not a rule)."""
    checked = _better_than_chance(record)
    if len(checked) < 2 or checked[0] is not record["ranked"][0]:
        return service(record)
    best = max(checked, key=lambda row: row["accuracy"])
    return [best] + [row for row in record["ranked"] if row["id"] != best["id"]]


RULES: dict[str, Rule] = {
    "service": service,
    "shot-score": shot_key(lambda s: s["score"]),
    "agreement-added-0.5": agreement_added(0.5),
    "agreement-added-1": agreement_added(1.0),
    "agreement-added-2": agreement_added(2.0),
    "mean-probability": shot_key(lambda s: s["confidence"] * math.exp(-s["map_cost"])),
    "best-checked (hindsight)": best_checked,
}
"""The rules a replay knows by name."""


def replay(records: Sequence[Record], rule: Rule) -> dict[str, Any]:
    """Each kind's mean normalised accuracy (with its spread over user seeds), oracle agreement
    and quality filter under ``rule``; the mean over kinds; users moved, better and worse."""
    by_kind: dict[str, dict[int, list[tuple[float, float, float]]]] = defaultdict(lambda: defaultdict(list))
    moved = better = worse = 0
    for record in records:
        order = rule(record)
        metrics = replay_metrics(record, order)
        by_kind[record["kind"]][record["seed"]].append(metrics)
        if order[0]["id"] != record["ranked"][0]["id"]:
            moved += 1
            before = replay_metrics(record, record["ranked"])[0]
            better += metrics[0] > before + 1e-9
            worse += metrics[0] < before - 1e-9
    kinds: dict[str, dict[str, float]] = {}
    for kind, seeds in by_kind.items():
        rows = [m for ms in seeds.values() for m in ms]

        def mean(values: list[float]) -> float:
            kept = [v for v in values if v == v]
            return float(np.mean(kept)) if kept else math.nan

        seed_means = [mean([m[0] for m in ms]) for ms in seeds.values()]
        seed_means = [v for v in seed_means if v == v]
        kinds[kind] = {
            "normalized_accuracy": mean([m[0] for m in rows]),
            "normalized_accuracy_seed_std": float(np.std(seed_means)) if seed_means else math.nan,
            "oracle_agreement_at1": mean([m[1] for m in rows]),
            "quality_filter": mean([m[2] for m in rows]),
            "users": float(len(rows)),
        }
    over = {
        key: float(np.nanmean([row[key] for row in kinds.values()]))
        for key in ("normalized_accuracy", "oracle_agreement_at1", "quality_filter")
    }
    return {"kinds": kinds, "mean over kinds": over, "moved": moved, "better": better, "worse": worse}


def replay_table(records: Sequence[Record], rules: Sequence[str]) -> str:
    """A markdown table: each kind's figures under each named rule (`RULES`)."""
    unknown = [name for name in rules if name not in RULES]
    if unknown:
        raise KeyError(f"unknown rules {unknown}; known: {list(RULES)}")
    results = {name: replay(records, RULES[name]) for name in rules}
    kinds = list(results[rules[0]]["kinds"])

    def cell(row: dict[str, float]) -> str:
        quality = "–" if row["quality_filter"] != row["quality_filter"] else f"{row['quality_filter']:.3f}"
        return (
            f"{row['normalized_accuracy']:.3f} ± {row['normalized_accuracy_seed_std']:.3f} / "
            f"{row['oracle_agreement_at1']:.3f} / {quality}"
        )

    lines = [
        "| kind | users | " + " | ".join(rules) + " |",
        "|---|---|" + "---|" * len(rules),
    ]
    for kind in kinds:
        users = int(results[rules[0]]["kinds"][kind]["users"])
        lines.append(
            f"| {kind} | {users} | " + " | ".join(cell(results[n]["kinds"][kind]) for n in rules) + " |"
        )
    lines.append(
        f"| **mean over kinds** | {len(records)} | "
        + " | ".join(
            "{normalized_accuracy:.4f} / {oracle_agreement_at1:.3f} / {quality_filter:.3f}".format(
                **results[n]["mean over kinds"]
            )
            for n in rules
        )
        + " |"
    )
    lines.append(
        "| users moved (better, worse) | | "
        + " | ".join(f"{results[n]['moved']} ({results[n]['better']}, {results[n]['worse']})" for n in rules)
        + " |"
    )
    return "\n".join(lines)
