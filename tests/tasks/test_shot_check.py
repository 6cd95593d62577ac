"""The shot check's scoring and re-ranking (the worker part runs in tests/e2e/test_embedded.py)."""

from __future__ import annotations

import numpy as np
import pytest

from app.ml.errors import InvalidInput
from app.ml.identify import ShotScore
from app.ml.runners.base import Predictions
from app.tasks.shot_check import ShotResult, _score, label_index, with_shot_check


def _result(learnware_id: int, score: float, names: list[str]) -> dict[str, object]:
    return {"rank": 0, "learnware_id": learnware_id, "score": score, "label_names": names}


def test_labels_map_by_name_whatever_their_order_and_case() -> None:
    assert label_index(["Positive", "negative "], ["negative", "positive"]).tolist() == [1, 0]
    with pytest.raises(InvalidInput, match="'neutral' is not among the task's labels"):
        label_index(["neutral", "positive"], ["negative", "positive"])


def test_a_model_of_the_tasks_label_names_is_scored_through_them() -> None:
    # The model's ids are in its own name order; the task's labels in the task's.
    probs = np.array([[0.9, 0.1], [0.4, 0.6], [0.2, 0.8], [0.7, 0.3]], dtype=np.float32)
    scored = _score(
        ["positive", "negative"],
        Predictions(labels=np.array([0, 1, 1, 0]), probs=probs),
        np.array([1, 0, 1, 1]),
        ["negative", "positive"],
        False,
    )
    # True labels positive, negative, positive, positive: model columns 0, 1, 0, 0.
    assert scored.label_map is None and scored.score.accuracy == 0.75
    assert scored.score.confidence == pytest.approx((0.9 + 0.6 + 0.2 + 0.7) / 4)


def test_a_renamed_label_set_is_scored_through_the_map_that_fits_best() -> None:
    scored = _score(
        ["negative", "positive"],
        Predictions(labels=np.array([0, 0, 1, 1]), probs=None),
        np.array([1, 1, 0, 0]),
        ["good", "bad"],
        True,
    )
    assert scored == ShotResult(ShotScore(1.0, 1.0), label_map={"negative": "bad", "positive": "good"})


def test_checked_matches_are_ranked_by_accuracy_then_confidence_and_carry_both() -> None:
    results = [
        _result(7, 0.9, ["a", "b"]),
        _result(8, 0.8, ["a", "b"]),
        _result(9, 0.7, ["a", "b"]),
        _result(10, 0.6, ["a", "b"]),
    ]
    checked = {
        7: ShotResult(ShotScore(0.75, 0.6)),
        8: None,
        9: ShotResult(ShotScore(0.75, 0.7), {"a": "y", "b": "x"}),
    }
    ranked = with_shot_check(results, checked, k=3)
    assert [r["learnware_id"] for r in ranked] == [9, 7, 8, 10]
    assert [r["rank"] for r in ranked] == [1, 2, 3, 4]
    assert [r["shot_accuracy"] for r in ranked] == [0.75, 0.75, None, None]
    assert [r["shot_confidence"] for r in ranked] == [0.7, 0.6, None, None]
    assert ranked[0]["label_map"] == {"a": "y", "b": "x"} and ranked[1]["label_map"] is None
    assert results[0]["rank"] == 0  # the input is not modified


def test_the_cli_shows_the_shot_check_and_the_label_map(capsys: pytest.CaptureFixture[str]) -> None:
    from app.cli.common import print_matches
    from app.tasks.schemas import MatchRead

    common = {"task_type": "text-classification", "model_format": "onnx", "tags": []}
    print_matches(
        [
            MatchRead(
                rank=1,
                learnware_id=4,
                score=0.91,
                name="reviews",
                label_names=["negative", "positive"],
                shot_accuracy=0.875,
                shot_confidence=0.8125,
                label_map={"negative": "bad", "positive": "good"},
                **common,
            ),
            MatchRead(rank=2, learnware_id=9, score=0.85, name="spam", label_names=["ham", "spam"], **common),
        ]
    )
    out = capsys.readouterr().out
    assert "88% (p 0.81)" in out and "negative→bad" in out and "ham, spam" in out and "–" in out
