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
other matches, or fit the spec otherwise, needs a run. A run with ``--wide-check K`` also keeps
each user's ranking with K checked (`wide_record`), so a rule prefixed ``wide:`` (`on_wide`)
replays a wider check beside the service's, user by user.

Why: ranking rules were chosen on replays of three kinds and then lost on the kinds the replay
left out (docs/benchmarks/identification.md, "Ties the examples cannot break"). A replay of every
kind on every market is the check a rule needs before a full run.
"""

from __future__ import annotations

import gzip
import json
import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
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

WIDE_PEERS = 2 * PEERS
"""As many for a wide ranking (`wide_record`), on the same pooled inputs: a rule may weigh more
of a wider check's matches by their agreement than the service's first five."""

Record = dict[str, Any]
Rule = Callable[[Record], list[dict[str, Any]]]


def ranking_record(market: Market, user: User, ranked: Sequence[Ranked]) -> Record:
    """One user's ranking as the service ranked it, with what a replay needs (module docstring)."""
    from app.bench.identification_kinds import true_names, user_accuracy

    truth = true_names(market, user)
    serving = {
        lw.id: user_accuracy(market, user, lw.id, map_by_name(truth, lw.label_names))
        for lw in market.learnwares
        if lw.id not in user.exclude and tier_of(truth, lw.label_names) == Tier.BY_NAME
    }
    own = {lw.variant: lw.id for lw in market.learnwares if lw.task == user.task}
    return {
        "kind": user.kind,
        "task": user.task,
        "seed": user.seed,
        "n_labels": len(user.shots.label_names),
        "n_examples": len(user.shots.texts),
        "oracle_by_name": max(serving.values()) if serving else None,
        "oracle_id": max(serving, key=lambda i: serving[i]) if serving else None,
        "good": own.get("good"),
        "corrupted": own.get("corrupted"),
        "ranked": _rows(market, user, ranked),
        "peer_answers": _peer_answers(market, ranked, PEERS),
    }


def wide_record(market: Market, user: User, ranked: Sequence[Ranked], check: int) -> dict[str, Any]:
    """The same user ranked with ``check`` candidates checked, named or not (`bench identify
    --wide-check`): its matches, and the declared-input answers of its first `WIDE_PEERS` checked
    matches better than chance (a replay weighs the first `PEERS` of them: `peer_kappas`). Kept
    under the user's record as ``wide``; `wide_view` replays it."""
    return {
        "check": check,
        "ranked": _rows(market, user, ranked),
        "peer_answers": _peer_answers(market, ranked, WIDE_PEERS),
    }


def wide_view(record: Record) -> Record | None:
    """The user's record with its wide ranking (`wide_record`) in place of the service's; None
    where the run kept none (a spec-only user, or a run without ``--wide-check``)."""
    wide = record.get("wide")
    if wide is None:
        return None
    return {**record, "ranked": wide["ranked"], "peer_answers": wide["peer_answers"]}


def _rows(market: Market, user: User, ranked: Sequence[Ranked]) -> list[dict[str, Any]]:
    """Each match as a replay reads it: the first `SHOWN`, and every checked one, in full."""
    from app.bench.identification_kinds import user_accuracy

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
    return rows


def _peer_answers(market: Market, ranked: Sequence[Ranked], count: int) -> dict[str, list[int]]:
    """The answers, through their maps, of the first ``count`` checked matches better than chance
    on the pooled declared inputs of the first `PEERS` of them (what the service pools), by id;
    {} with fewer than `MIN_PEERS`."""
    peers = [r for r in ranked if r.checked and r.beats_chance and r.label_map is not None][:count]
    if len(peers) < MIN_PEERS:
        return {}
    texts = pooled_inputs([market.learnwares[r.id].inputs for r in peers[:PEERS]])
    answered: dict[str, list[int]] = {}
    for r in peers:
        assert r.label_map is not None
        predicted = market.predict_declared(market.learnwares[r.id], texts)
        answered[str(r.id)] = mapped_answers(predicted.labels, predicted.probs, r.label_map).tolist()
    return answered


def read_records(paths: Iterable[Path], reruns: Iterable[Path] = ()) -> list[Record]:
    """The records of one or more `--rankings` files (gzipped where the name ends in .gz), in
    order; each record of the ``reruns`` (a partial run of the same market on newer code:
    `bench identify --kind … --task …`) in place of the same user's (kind, task, user seed).
    A rerun's user that the runs do not hold is refused: it would be counted beside them."""
    records = [record for path in paths for record in _read_lines(path)]
    where = {_user(record): i for i, record in enumerate(records)}
    for path in reruns:
        for record in _read_lines(path):
            if _user(record) not in where:
                kind, task, seed = _user(record)
                raise ValueError(f"{path}: the runs hold no {kind!r} user of {task} with seed {seed}")
            records[where[_user(record)]] = record
    return records


def _read_lines(path: Path) -> list[Record]:
    text = gzip.decompress(path.read_bytes()).decode() if path.suffix == ".gz" else path.read_text("utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _user(record: Record) -> tuple[str, str, int]:
    return record["kind"], record["task"], int(record["seed"])


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


def peer_kappas(record: Record, ids: Iterable[int] | None = None) -> dict[int, float]:
    """Each recorded peer's mean κ with the others (`app.ml.agreement.agreement_scores`), among
    the peers of ``ids`` only where given."""
    answered = {int(i): np.asarray(a, dtype=np.int64) for i, a in record["peer_answers"].items()}
    if ids is not None:
        keep = set(ids)
        answered = {i: a for i, a in answered.items() if i in keep}
    return agreement_scores(answered, int(record["n_labels"]))


def _better_than_chance(record: Record) -> list[dict[str, Any]]:
    return [row for row in record["ranked"] if row.get("checked") and row.get("beats_chance")]


def _weighable(
    record: Record, peers: int = PEERS
) -> tuple[list[dict[str, Any]], Callable[[dict[str, Any]], float]] | None:
    """The first ``peers`` checked matches better than chance and each one's κ among them (one
    without a κ at the others' mean), as the service weighs them (``peers`` = `PEERS`); None where it does not (fewer
    than `MIN_PEERS` checked, or the best not first)."""
    checked = _better_than_chance(record)
    kappas = peer_kappas(record, [row["id"] for row in checked[:peers]])
    if len(checked) < 2 or not kappas or checked[0] is not record["ranked"][0]:
        return None
    neutral = float(np.mean(list(kappas.values())))
    return checked[:peers], lambda row: kappas.get(row["id"], neutral)


def service(record: Record) -> list[dict[str, Any]]:
    """The order the service gave."""
    return list(record["ranked"])


FEATURES: dict[str, Callable[[dict[str, Any], float], float]] = {
    "shot score": lambda row, kappa: float(row["shot"]["score"]),
    "κ": lambda row, kappa: kappa,
    "cosine": lambda row, kappa: float(row["cosine"]),
    "shot accuracy": lambda row, kappa: float(row["shot"]["accuracy"]),
    "confidence": lambda row, kappa: float(row["shot"]["confidence"]),
}
"""What `fitted_weights` weighs: of one of the first checked matches, with its κ among them."""


def weighed(weights: Mapping[str, float], peers: int = PEERS) -> Rule:
    """The first ``peers`` checked matches better than chance by the weighed sum of their
    ``weights``' `FEATURES` (one without a κ at the others' mean); the rest as recorded. Unchanged
    where fewer than `MIN_PEERS` were checked (no κ) or the best is not first."""
    unknown = [name for name in weights if name not in FEATURES]
    if unknown:
        raise KeyError(f"unknown features {unknown}; known: {list(FEATURES)}")

    def rule(record: Record) -> list[dict[str, Any]]:
        weighable = _weighable(record, peers)
        if weighable is None:
            return service(record)
        head, kappa_of = weighable

        def key(row: dict[str, Any]) -> float:
            return sum(w * FEATURES[f](row, kappa_of(row)) for f, w in weights.items())

        ordered = sorted(head, key=key, reverse=True)
        moved = {row["id"] for row in head}
        return ordered + [row for row in record["ranked"] if row["id"] not in moved]

    return rule


def agreement_added(weight: float = 1.0, peers: int = PEERS) -> Rule:
    """The first ``peers`` checked matches better than chance by their shot score plus ``weight``
    × their κ with one another (the service's rule, `ranking.weighed_by_agreement`, with
    `PEERS`; more only where the record kept their answers: a wide ranking's `WIDE_PEERS`)."""
    return weighed({"shot score": 1.0, "κ": weight}, peers)


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


_TIER_ORDER = {"labels-by-name": 0, "label-map": 1, "cannot-answer": 2}


def chance_margin(nats: float | None) -> Rule:
    """The agreement rule with "better than chance" asking for evidence: a checked match counts as
    better than a guess only where its summed shot score beats the guess's by more than ``nats``
    (None: log of the number checked, so that of k checked matches no better than a guess, one is
    let through on average by Markov's bound on their likelihood ratios). Those that fall short
    join the service's third group, in the spec's order (tier, then score); the rest is
    `agreement_added` on that order. At ``nats`` 0 it is the agreement rule, top for top. Tried
    2026-12-08, not kept."""

    def rule(record: Record) -> list[dict[str, Any]]:
        rows = [row for row in record["ranked"] if "key" in row]
        unrecorded = [row for row in record["ranked"] if "key" not in row]
        n, guess = int(record["n_examples"]), math.log(1.0 / int(record["n_labels"]))
        margin = math.log(max(1, sum(1 for row in rows if row.get("checked")))) if nats is None else nats

        def beats(row: dict[str, Any]) -> bool:
            return bool(row.get("checked")) and n * (float(row["shot"]["score"]) - guess) > margin + 1e-9

        def group(row: dict[str, Any]) -> int:
            if row["tier"] == "cannot-answer":
                return 4
            if row.get("checked"):
                return 0 if beats(row) else 2
            return 1 if row.get("map_how") is not None else 3

        regrouped = sorted(
            ({**row, "beats_chance": beats(row)} for row in rows),
            key=lambda row: (
                group(row),
                # by shot score in the first group, in the spec's order in the third, as recorded else
                -float(row["shot"]["score"]) if group(row) == 0 else 0.0,
                (_TIER_ORDER[row["tier"]], -float(row["cosine"])) if group(row) == 2 else (0, 0.0),
            ),
        )
        return agreement_added(1.0)({**record, "ranked": regrouped + unrecorded})

    return rule


RULES: dict[str, Rule] = {
    "service": service,
    "shot-score": shot_key(lambda s: s["score"]),
    "agreement-added-0.5": agreement_added(0.5),
    "agreement-added-1": agreement_added(1.0),
    "agreement-added-2": agreement_added(2.0),
    "agreement-added-1, ten peers": agreement_added(1.0, WIDE_PEERS),
    "mean-probability": shot_key(lambda s: s["confidence"] * math.exp(-s["map_cost"])),
    "best-checked (hindsight)": best_checked,
}
"""The rules a replay knows by name; `rule_named` also takes ``weighed:`` rules."""


def on_wide(rule: Rule) -> Rule:
    """``rule`` on the user's wide ranking (`wide_view`) where the run kept one, on the service's
    where it did not (spec-only users, whose examples never reach the dock: no check to widen).
    So ``wide:service`` beside ``service`` is the wider check against the service's, user by user."""

    def wide(record: Record) -> list[dict[str, Any]]:
        view = wide_view(record)
        return rule(record if view is None else view)

    return wide


def rule_named(name: str) -> Rule:
    """A rule of `RULES`, or ``weighed:FEATURE=WEIGHT,…`` (`weighed`; shot score 1 unless named),
    e.g. ``weighed:κ=0.8,cosine=0.2``, or ``chance-margin:NATS`` or ``chance-margin:log-k``
    (`chance_margin`), or any of them prefixed ``wide:`` (`on_wide`)."""
    if name.startswith("wide:"):
        return on_wide(rule_named(name.removeprefix("wide:")))
    if name in RULES:
        return RULES[name]
    if name.startswith("chance-margin:"):
        value = name.removeprefix("chance-margin:")
        try:
            return chance_margin(None if value == "log-k" else float(value))
        except ValueError:
            raise KeyError(f"{name!r}: chance-margin takes a number of nats or log-k") from None
    if not name.startswith("weighed:"):
        raise KeyError(
            f"unknown rule {name!r}; known: {list(RULES)}, weighed:FEATURE=WEIGHT,..., "
            "chance-margin:NATS or wide:RULE"
        )
    weights = {"shot score": 1.0}
    for part in name.removeprefix("weighed:").split(","):
        feature, sep, value = part.partition("=")
        try:
            weights[feature.strip()] = float(value)
        except ValueError:
            raise KeyError(f"{part!r} in rule {name!r} is not FEATURE=WEIGHT") from None
        if not sep:
            raise KeyError(f"{part!r} in rule {name!r} is not FEATURE=WEIGHT")
    return weighed(weights)


def fitted_weights(records: Sequence[Record], features: Sequence[str] = tuple(FEATURES)) -> dict[str, Any]:
    """How much each of ``features`` is worth, in units of shot score, when they order the first
    `PEERS` checked matches: a logistic model of which of two of them is better on the user's test
    set, fitted on every such pair of every user (a pair within a hundredth of accuracy tells
    nothing and is left out) by Newton steps with a little L2 (1e-2). A check on a rule's weights
    (`agreement_added`), not a rule: weights fitted on one market and replayed on another say
    whether a feature holds beyond the users it was fitted on. The weights are in units of the
    shot score's where it comes first and its weight is positive, raw otherwise."""
    unknown = [name for name in features if name not in FEATURES]
    if unknown:
        raise KeyError(f"unknown features {unknown}; known: {list(FEATURES)}")
    diffs: list[np.ndarray] = []
    for record in records:
        weighable = _weighable(record)
        if weighable is None:
            continue
        head, kappa_of = weighable
        x = np.array([[FEATURES[f](row, kappa_of(row)) for f in features] for row in head])
        accuracy = [float(row["accuracy"]) for row in head]
        for i in range(len(head)):
            for j in range(len(head)):
                if accuracy[i] > accuracy[j] + 0.01:
                    diffs.append(x[i] - x[j])
    if not diffs:
        raise ValueError("no user has two checked matches of different accuracy to learn from")
    # Each pair both ways (the better one first labelled 1, its mirror 0): no intercept is needed.
    X = np.concatenate([np.stack(diffs), -np.stack(diffs)])
    y = np.concatenate([np.ones(len(diffs)), np.zeros(len(diffs))])
    w = np.zeros(X.shape[1])
    for _ in range(50):
        p = 1.0 / (1.0 + np.exp(-(X @ w)))
        gradient = X.T @ (p - y) / len(y) + 1e-2 * w
        hessian = (X.T * (p * (1 - p))) @ X / len(y) + 1e-2 * np.eye(len(w))
        step = np.linalg.solve(hessian, gradient)
        w -= step
        if float(np.abs(step).max()) < 1e-10:
            break
    scale = w[0] if features[0] == "shot score" and w[0] > 0 else 1.0
    return {"pairs": len(diffs), "weights": {f: float(v / scale) for f, v in zip(features, w, strict=True)}}


MISSES = (
    "in the first checked",
    "checked further down",
    "checked, no better than chance",
    "not checked",
    "first, through another map",
)
"""Where the best learnware stood for a user whose top match is not it (`oracle_miss`); the last:
it is first, but the map chosen for it answers worse than the true one (codes, renamings)."""


def _first_reaching(record: Record, order: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """The first match of ``order`` as good as the user's oracle (within a point), through the
    map chosen for it; None where none is."""
    oracle = max(float(record["oracle_by_name"]), float(order[0].get("accuracy", 0.0)))
    return next((row for row in order if float(row.get("accuracy", 0.0)) >= oracle - 0.01), None)


def oracle_miss(record: Record, order: Sequence[dict[str, Any]]) -> str | None:
    """Where the first learnware as good as the user's oracle (within a point) stood in ``order``
    when the top match is not one (one of `MISSES`; where none is, the oracle's own learnware,
    answering through another map); None where the top is one, or where there is
    no oracle by name. What a better rule could reach: a reordering of the first `PEERS` checked
    matches (in ``order``) reaches only the first kind of miss."""
    if replay_metrics(record, order)[1] != 0.0:  # the top is the oracle, or there is none
        return None
    # The checked matches as ``order`` has them: a rule that reads the wide ranking checked more.
    checked = [row["id"] for row in order if row.get("checked") and row.get("beats_chance")]
    # No match reaches it through the map chosen for it: where the oracle's own learnware stands
    # (records since 2026-12-07 name it; before, such a user counts as never checked).
    best = _first_reaching(record, order) or next(
        (row for row in order if row["id"] == record.get("oracle_id")), None
    )
    if best is None:
        return MISSES[3]  # beyond the recorded matches: never checked
    if best is order[0]:
        return MISSES[4]
    if best["id"] in checked[:PEERS]:
        return MISSES[0]
    if best["id"] in checked:
        return MISSES[1]
    return MISSES[2] if best.get("checked") else MISSES[3]


def examples_favour_the_top(record: Record, order: Sequence[dict[str, Any]]) -> bool:
    """Whether the user's own examples bear out the top match at least as well as the first
    learnware as good as the oracle (accuracy and log-likelihood both): a miss no reading of the
    examples could mend, only what else is known of the matches (their specs, their agreement)."""
    best = _first_reaching(record, order)
    top, theirs = order[0].get("shot"), None if best is None else best.get("shot")
    if top is None or theirs is None:
        return False
    return bool(top["accuracy"] >= theirs["accuracy"] and top["log_likelihood"] >= theirs["log_likelihood"])


def replay(records: Sequence[Record], rule: Rule) -> dict[str, Any]:
    """Each kind's mean normalised accuracy (with its spread over user seeds), oracle agreement
    and quality filter under ``rule``; the mean over kinds; users moved, better and worse; where
    the best learnware stood for the users whose top match is not it (`oracle_miss`)."""
    by_kind: dict[str, dict[int, list[tuple[float, float, float]]]] = defaultdict(lambda: defaultdict(list))
    moved = better = worse = 0
    misses = dict.fromkeys(MISSES, 0)
    favoured = 0  # misses in the first checked where the examples favour the top
    for record in records:
        order = rule(record)
        metrics = replay_metrics(record, order)
        by_kind[record["kind"]][record["seed"]].append(metrics)
        if (miss := oracle_miss(record, order)) is not None:
            misses[miss] += 1
            favoured += miss == MISSES[0] and examples_favour_the_top(record, order)
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
    # The spread over user seeds of the mean over kinds: each seed's kinds averaged, then the std.
    per_seed = {
        seed: float(
            np.nanmean(
                [np.nanmean([m[0] for m in seeds[seed]]) for seeds in by_kind.values() if seed in seeds]
            )
        )
        for seed in sorted({seed for seeds in by_kind.values() for seed in seeds})
    }
    over["normalized_accuracy_seed_std"] = float(np.nanstd(list(per_seed.values())))
    return {
        "kinds": kinds,
        "mean over kinds": over,
        "moved": moved,
        "better": better,
        "worse": worse,
        "oracle misses": misses,
        "examples favour the top": favoured,
        "per seed": per_seed,
    }


def replay_table(records: Sequence[Record], rules: Sequence[str]) -> str:
    """A markdown table: each kind's figures under each named rule (`rule_named`)."""
    chosen = {name: rule_named(name) for name in rules}
    results = {name: replay(records, rule) for name, rule in chosen.items()}
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
            "{normalized_accuracy:.4f} ± {normalized_accuracy_seed_std:.4f} / {oracle_agreement_at1:.3f} / "
            "{quality_filter:.3f}".format(**results[n]["mean over kinds"])
            for n in rules
        )
        + " |"
    )
    lines.append(
        "| users moved (better, worse) | | "
        + " | ".join(f"{results[n]['moved']} ({results[n]['better']}, {results[n]['worse']})" for n in rules)
        + " |"
    )
    first = results[rules[0]]["per seed"]
    lines.append(
        f"| normalised accuracy against {rules[0]}, each user seed (paired) | | – | "
        + " | ".join(
            " / ".join(f"{results[n]['per seed'][seed] - first[seed]:+.4f}" for seed in first)
            for n in rules[1:]
        )
        + " |"
    )
    lines.append(
        "| the best learnware, where it is not first: "
        + " / ".join(MISSES)
        + " | | "
        + " | ".join(" / ".join(str(v) for v in results[n]["oracle misses"].values()) for n in rules)
        + " |"
    )
    lines.append(
        f"| of those {MISSES[0]}, the user's examples favour the top (accuracy and likelihood) | | "
        + " | ".join(str(results[n]["examples favour the top"]) for n in rules)
        + " |"
    )
    return "\n".join(lines)


def flattery_table(records: Sequence[Record]) -> str:
    """How much better each kind of learnware answered the users' examples than its test split:
    the checked matches whose map the names chose, grouped by whether the learnware is of the
    user's own task, its family and variant (the key's last two parts), the mean of its accuracy
    on the examples less its test accuracy. The benchmark draws most users' examples from the
    train split the task's own learnwares trained on (BENCHMARK.md); a model that memorises its
    training set is flattered there, one of another task is not."""
    gaps: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    for record in records:
        for row in record["ranked"]:
            shot = row.get("shot")
            if not row.get("checked") or shot is None or row.get("map_how") != "names":
                continue
            task, family, variant = str(row["key"]).rsplit("-", 2)
            whose = "own task" if task == record["task"] else "another task"
            gaps[(whose, family, variant)].append(float(shot["accuracy"]) - float(row["accuracy"]))
    lines = [
        "| learnware | family | variant | checked | examples − test accuracy |",
        "|---|---|---|---|---|",
    ]
    for (whose, family, variant), values in sorted(gaps.items()):
        lines.append(f"| {whose} | {family} | {variant} | {len(values)} | {float(np.mean(values)):+.3f} |")
    return "\n".join(lines)
