"""How a ranked task reads in the CLI (the worker's shot check runs in tests/e2e/test_embedded.py;
its rules in tests/pave/test_ranking.py)."""

from __future__ import annotations

import pytest


def test_the_cli_shows_the_shot_check_the_label_map_and_why(capsys: pytest.CaptureFixture[str]) -> None:
    from app.cli.common import print_matches
    from app.tasks.schemas import MatchRead

    common = {"task_type": "text-classification", "model_format": "onnx", "tags": []}
    print_matches(
        [
            MatchRead(
                rank=1,
                learnware_id=4,
                score=0.41,
                name="reviews",
                label_names=["negative", "positive"],
                tier="label-map",
                checked=True,
                shot_accuracy=0.875,
                shot_confidence=0.8125,
                label_map={"negative": "bad", "positive": "good"},
                label_map_how="meaning",
                reason="checked on your 16 examples: 88% right; labels matched by the meaning of their names",
                **common,
            ),
            MatchRead(rank=2, learnware_id=9, score=0.85, name="spam", label_names=["ham", "spam"], **common),
        ]
    )
    out = capsys.readouterr().out
    assert "88% (p 0.81)" in out and "negative→bad" in out and "ham, spam" in out and "–" in out
    assert "checked on your 16" in out and "Order: matches checked on your examples" in out
