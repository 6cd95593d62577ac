"""Replays of recorded rankings (`app.bench.rankings`): the figures of the recorded order, and of
rules that reorder the checked matches, without ranking again."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from app.bench.rankings import (
    RULES,
    agreement_added,
    examples_favour_the_top,
    fitted_weights,
    flattery_table,
    oracle_miss,
    peer_kappas,
    read_records,
    replay,
    replay_metrics,
    replay_table,
    rule_named,
    service,
    wide_view,
)
from app.cli.main import app


def _row(i: int, accuracy: float, score: float | None) -> dict[str, Any]:
    checked = score is not None
    return {
        "id": i,
        "key": f"lw-{i}",
        "cosine": 0.3 - 0.01 * i,
        "tier": "labels-by-name",
        "checked": checked,
        "beats_chance": checked and score > math.log(0.5),
        "map_how": "names",
        "accuracy": accuracy,
        "shot": None if not checked else {"score": score, "log_likelihood": score, "accuracy": 0.8, "confidence": 0.7, "map_cost": 0.0},
    }  # fmt: skip


def _record(kind: str = "same names", seed: int = 0, **peers: list[int]) -> dict[str, Any]:
    """A binary user: the weak twin (1) best on the examples, the good one (2) close behind and
    borne out more on the peers' inputs, a third (3) far behind; 4 unchecked."""
    return {
        "kind": kind,
        "task": "sst2",
        "seed": seed,
        "n_labels": 2,
        "n_examples": 16,
        "oracle_by_name": 0.90,
        "good": 2,
        "corrupted": 4,
        "ranked": [_row(1, 0.60, -0.20), _row(2, 0.90, -0.25), _row(3, 0.80, -0.60), _row(4, 0.50, None)],
        "peer_answers": {str(k): v for k, v in peers.items()},
    }


# The good one (2) and the third (3) agree; the weak twin (1) answers almost at random.
AGREEING = {
    "1": [0, 1, 1, 0, 1, 0, 0, 1, 1, 0],
    "2": [0, 0, 0, 0, 0, 1, 1, 1, 1, 1],
    "3": [0, 0, 0, 0, 1, 1, 1, 1, 1, 1],
}


def test_the_recorded_order_gives_the_recorded_figures() -> None:
    record = _record()
    assert replay_metrics(record, service(record)) == (pytest.approx(0.60 / 0.90), 0.0, 1.0)
    # A top-1 read through a map better than any by name is its own oracle.
    better = {**record, "oracle_by_name": 0.5}
    assert replay_metrics(better, service(better))[:2] == (1.0, 1.0)
    # No learnware answers the user's labels by name: nothing to normalise by.
    assert all(v != v for v in replay_metrics({**record, "oracle_by_name": None}, service(record))[:2])


def test_the_agreement_added_to_the_score_reorders_the_first_checked_matches() -> None:
    record = _record(**AGREEING)
    kappas = peer_kappas(record)
    assert kappas[3] > kappas[2] > kappas[1]  # 0.4, 0.3, -0.1
    order = [row["id"] for row in agreement_added(1.0)(record)]
    assert order[:2] == [2, 3] and order[-1] == 4  # the unchecked one stays where it was
    assert replay_metrics(record, agreement_added(1.0)(record))[:2] == (1.0, 1.0)
    # Without peers' answers (fewer than three checked), nothing moves.
    assert agreement_added(1.0)(_record()) == service(_record())


def test_the_shot_score_rule_gives_back_the_order_before_the_agreement_weighed_in() -> None:
    # A record of the service as it ranks now: the good one (2) first by score plus κ.
    record = _record(**AGREEING)
    record["ranked"] = [record["ranked"][i] for i in (1, 2, 0, 3)]
    assert [row["id"] for row in RULES["shot-score"](record)] == [1, 2, 3, 4]
    # On a record in score order it moves nothing.
    assert RULES["shot-score"](_record()) == service(_record())


def test_a_replay_counts_each_kind_and_the_users_it_moves(tmp_path: Path) -> None:
    records = [_record(**AGREEING), _record(seed=1), _record(kind="4 shots", **AGREEING)]
    result = replay(records, RULES["agreement-added-1"])
    assert (result["moved"], result["better"], result["worse"]) == (2, 2, 0)
    assert result["kinds"]["same names"]["users"] == 2
    assert result["kinds"]["same names"]["normalized_accuracy"] == pytest.approx((1.0 + 0.6 / 0.9) / 2)
    assert result["mean over kinds"]["normalized_accuracy"] == pytest.approx(
        ((1.0 + 0.6 / 0.9) / 2 + 1.0) / 2
    )
    table = replay_table(records, ["service", "agreement-added-1"])
    assert "| 4 shots | 1 | 0.667 ± 0.000 / 0.000 / 1.000 | 1.000 ± 0.000 / 1.000 / 1.000 |" in table
    assert "| users moved (better, worse) | | 0 (0, 0) | 2 (2, 0) |" in table
    # Paired by user seed: seed 0's two users gained 1/3 each, seed 1's user did not move.
    assert (
        "| normalised accuracy against service, each user seed (paired) | | – | +0.3333 / +0.0000 |" in table
    )
    with pytest.raises(KeyError, match="unknown rule"):
        replay_table(records, ["no such rule"])
    path = tmp_path / "rankings.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    assert read_records([path]) == records
    packed = tmp_path / "rankings.jsonl.gz"
    packed.write_bytes(gzip.compress(path.read_bytes()))
    assert read_records([packed, path]) == records + records
    # A partial rerun's records stand in place of the same users' (kind, task, user seed).
    moved = {**records[0], "ranked": records[0]["ranked"][::-1]}
    rerun = tmp_path / "rerun.jsonl"
    rerun.write_text(json.dumps(moved) + "\n")
    assert read_records([path], [rerun]) == [moved, *records[1:]]
    stranger = tmp_path / "stranger.jsonl"
    stranger.write_text(json.dumps({**records[0], "task": "no such task"}) + "\n")
    with pytest.raises(ValueError, match="the runs hold no"):
        read_records([path], [stranger])
    refused = CliRunner().invoke(app, ["bench", "identify-replay", str(path), "--rerun", str(stranger)])
    assert refused.exit_code != 0 and "the runs hold no" in refused.output
    shown = CliRunner().invoke(
        app, ["bench", "identify-replay", str(path), "--rule", "service", "--rule", "agreement-added-1"]
    )
    assert shown.exit_code == 0, shown.output
    assert "| **mean over kinds** | 3 |" in shown.output
    one_task = CliRunner().invoke(app, ["bench", "identify-replay", str(path), "--task", "sst2"])
    assert one_task.exit_code == 0 and "| **mean over kinds** | 3 |" in one_task.output
    no_spec_only = CliRunner().invoke(
        app, ["bench", "identify-replay", str(path), "--skip-kind", "4 shots", "--rule", "service"]
    )
    assert no_spec_only.exit_code == 0 and "| **mean over kinds** | 2 |" in no_spec_only.output
    four = CliRunner().invoke(app, ["bench", "identify-replay", str(path), "--kind", "4 shots"])
    assert four.exit_code == 0 and "| **mean over kinds** | 1 |" in four.output
    none = CliRunner().invoke(app, ["bench", "identify-replay", str(path), "--kind", "codes"])
    assert none.exit_code != 0 and "no user of those kinds" in none.output
    no_task = CliRunner().invoke(app, ["bench", "identify-replay", str(path), "--task", "cola"])
    assert no_task.exit_code != 0 and "no user of the tasks" in no_task.output
    refused = CliRunner().invoke(app, ["bench", "identify-replay", str(path), "--rule", "nope"])
    assert refused.exit_code != 0 and "unknown rule" in refused.output
    fitted = CliRunner().invoke(
        app, ["bench", "identify-replay", str(path), "--fit", "shot score", "--fit", "κ"]
    )
    assert fitted.exit_code == 0, fitted.output
    assert json.loads(fitted.output)["weights"]["shot score"] == 1.0


def test_a_miss_says_where_the_best_learnware_stood() -> None:
    record = _record()
    assert oracle_miss(record, service(record)) == "in the first checked"  # 2, second
    assert oracle_miss(record, agreement_added(1.0)(_record(**AGREEING))) is None  # 2 is first
    unchecked_best = {**record, "oracle_by_name": 0.95}
    unchecked_best["ranked"] = [*record["ranked"][:3], {**record["ranked"][3], "accuracy": 0.95}]
    assert oracle_miss(unchecked_best, service(unchecked_best)) == "not checked"
    assert oracle_miss({**record, "oracle_by_name": None}, service(record)) is None
    # The best learnware by name first, but read through a map the examples chose that answers
    # worse (0.60 of its 0.95 by the true names): no match reaches the oracle, and the record
    # names the oracle's learnware. A record without that name counts it never checked.
    mapped = {**record, "oracle_by_name": 0.95, "oracle_id": 1}
    assert oracle_miss(mapped, service(mapped)) == "first, through another map"
    assert oracle_miss({**mapped, "oracle_id": 3}, service(mapped)) == "in the first checked"
    assert oracle_miss({**record, "oracle_by_name": 0.95}, service(record)) == "not checked"
    assert replay([record, unchecked_best, mapped], service)["oracle misses"] == {
        "in the first checked": 1,
        "checked further down": 0,
        "checked, no better than chance": 0,
        "not checked": 1,
        "first, through another map": 1,
    }


def test_a_miss_the_examples_cannot_mend_is_counted() -> None:
    """The weak twin (1) is first and as right on the examples as the good one (2), and likelier:
    the examples favour it. Where the good one is likelier on them, a rule could have read it."""
    record = _record()
    assert examples_favour_the_top(record, service(record))
    likelier = {**record, "ranked": [record["ranked"][0], _row(2, 0.90, -0.10), *record["ranked"][2:]]}
    assert not examples_favour_the_top(likelier, service(likelier))
    assert replay([record, likelier], service)["examples favour the top"] == 1


def test_a_weighed_rule_is_named_by_its_features_and_weights() -> None:
    record = _record(**AGREEING)
    assert rule_named("weighed:κ=1")(record) == agreement_added(1.0)(record)
    # The cosine (0.29 for 1, 0.28 for 2) at a large weight puts the first-ranked back on top.
    assert rule_named("weighed:κ=1,cosine=100")(record)[0]["id"] == 1
    for bad in ("weighed:height=2", "weighed:κ", "weighed:κ=much", "nope"):
        with pytest.raises(KeyError):
            rule_named(bad)


def test_fitted_weights_find_what_separates_the_better_matches() -> None:
    # The better one of each pair (2 above 3 above 1) is ordered by κ, not by the shot score:
    # κ's fitted weight in units of shot score is large and positive.
    records = [_record(seed=s, **AGREEING) for s in range(3)]
    fitted = fitted_weights(records, ["shot score", "κ"])
    assert fitted["pairs"] == 9
    assert fitted["weights"]["κ"] > 1.0
    with pytest.raises(KeyError, match="unknown features"):
        fitted_weights(records, ["shot score", "height"])
    with pytest.raises(ValueError, match="no user"):
        fitted_weights([_record()], ["shot score", "κ"])


def test_kappas_among_the_first_checked_only_where_more_peers_were_recorded() -> None:
    # A wide record keeps a fourth peer's answers; the rule weighs the first five checked, so a
    # peer outside them does not move the others' kappas.
    four = {**AGREEING, "5": [1, 1, 1, 1, 1, 0, 0, 0, 0, 0]}
    record = _record(**four)
    assert peer_kappas(record, [1, 2, 3]) == peer_kappas(_record(**AGREEING))
    assert peer_kappas(record) != peer_kappas(_record(**AGREEING))


def test_more_peers_weigh_in_only_where_their_answers_were_kept() -> None:
    """A wide record keeps ten peers' answers: a rule may weigh them all. With six checked, the
    sixth (last on the examples, but borne out by the good ones) is weighed by the ten-peer rule
    only."""
    agreeing = AGREEING["2"]
    answers = {**AGREEING, "5": agreeing, "6": agreeing, "7": [1, 0, 1, 0, 1, 0, 1, 0, 1, 0]}
    record = _record(**answers)
    checked = [_row(5, 0.85, -0.62), _row(7, 0.55, -0.63), _row(6, 0.92, -0.64)]
    record["ranked"] = [*record["ranked"][:3], *checked, record["ranked"][3]]
    five = [row["id"] for row in agreement_added(1.0)(record)]
    ten = [row["id"] for row in RULES["agreement-added-1, ten peers"](record)]
    assert five.index(6) == 5 and five[-1] == 4  # outside the first five: where it was
    assert ten.index(6) < 5 and ten[-1] == 4
    assert peer_kappas(record, [1, 2, 3, 5, 7]) != peer_kappas(record)


def test_a_wide_ranking_replays_in_place_of_the_service_s(tmp_path: Path) -> None:
    """`bench identify --wide-check` keeps each user's wider ranking under ``wide``; the replay
    reads it as the user's ranking, and leaves out the users with none (spec only)."""
    narrow = _record()  # the weak twin first, only three checked and no peers' answers
    wide = _record(**AGREEING)
    record = {**narrow, "wide": {"check": 20, "ranked": wide["ranked"], "peer_answers": wide["peer_answers"]}}
    view = wide_view(record)
    assert view is not None and view["ranked"] == wide["ranked"] and view["peer_answers"] == AGREEING
    assert wide_view(narrow) is None
    path = tmp_path / "rankings.jsonl"
    path.write_text(json.dumps(record) + "\n" + json.dumps({**narrow, "kind": "spec only"}) + "\n")
    shown = CliRunner().invoke(
        app,
        ["bench", "identify-replay", str(path), "--wide", "--rule", "service", "--rule", "agreement-added-1"],
    )
    assert shown.exit_code == 0, shown.output
    assert (
        "| **mean over kinds** | 1 |" in shown.output
        and "| users moved (better, worse) | | 0 (0, 0) | 1 (1, 0) |" in shown.output
    )
    # Beside the service's, user by user: the wide ranking's top where it has one.
    paired = CliRunner().invoke(
        app, ["bench", "identify-replay", str(path), "--rule", "service", "--rule", "wide:agreement-added-1"]
    )
    assert paired.exit_code == 0, paired.output
    assert (
        "| **mean over kinds** | 2 |" in paired.output
        and "| users moved (better, worse) | | 0 (0, 0) | 1 (1, 0) |" in paired.output
    )
    assert rule_named("wide:service")(narrow) == service(narrow)
    none = tmp_path / "narrow.jsonl"
    none.write_text(json.dumps(narrow) + "\n")
    refused = CliRunner().invoke(app, ["bench", "identify-replay", str(none), "--wide"])
    assert refused.exit_code != 0 and "no wide ranking" in refused.output


def test_flattery_compares_each_learnwares_examples_with_its_test_split() -> None:
    """Own task or another, family and variant from the key; the examples' accuracy less the test
    accuracy, averaged over the checked matches mapped by name; unchecked ones left out."""
    record = _record()
    record["ranked"] = [
        {**_row(1, 0.60, -0.20), "key": "sst2-onnx-good"},  # examples 0.8: +0.20
        {**_row(2, 0.70, -0.25), "key": "sst2-onnx-good"},  # +0.10
        {**_row(3, 0.75, -0.30), "key": "mr-lora-small5"},  # +0.05
        {**_row(4, 0.10, None), "key": "mr-lora-good"},  # unchecked
    ]
    lines = flattery_table([record]).splitlines()
    assert lines[2:] == [
        "| another task | lora | small5 | 1 | +0.050 |",
        "| own task | onnx | good | 2 | +0.150 |",
    ]


def test_a_margin_over_chance_puts_a_hairs_breadth_win_behind_the_unchecked() -> None:
    record = _record(**AGREEING)
    # The third (3) beats a guess (log 0.5 = −0.693) by a hair: 16 × 0.003 nats in all.
    record["ranked"][2]["shot"] = {**record["ranked"][2]["shot"], "score": -0.690}
    at_zero = rule_named("chance-margin:0")(record)
    assert [row["id"] for row in at_zero] == [row["id"] for row in agreement_added(1.0)(record)]
    with_margin = [row["id"] for row in rule_named("chance-margin:1")(record)]
    assert 3 in [row["id"] for row in at_zero[:3]] and set(with_margin[:2]) == {1, 2}
    assert with_margin[2:] == [4, 3]  # behind the unchecked that answers by name
    # log k: three checked, log 3 = 1.1 nats; the first two beat a guess by 7.9 and 7.1.
    assert [row["id"] for row in rule_named("chance-margin:log-k")(record)][2:] == [4, 3]
    with pytest.raises(KeyError, match="chance-margin takes"):
        rule_named("chance-margin:lots")
