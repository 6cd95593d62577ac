"""How a ranked task reads in the CLI (the worker's shot check runs in tests/e2e/test_embedded.py;
its rules in tests/pave/test_ranking.py)."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from app.ml.errors import InvalidPackage

if TYPE_CHECKING:
    from app.ml.runners.base import Runner


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


def test_a_worker_keeps_the_models_it_checked_last_loaded(
    tfidf_packages: dict[str, Path], tmp_path: Path, datasets_dir: Path
) -> None:
    """`LoadedRunners`: a package checked again is not loaded again, the least recently checked
    leaves first, a model that fails to load is not kept, and a kept model still runs after its
    extracted folder is gone (it holds its weights, not the files)."""
    from app.ml.data import few_shot, load_task
    from app.ml.packages import extract_package
    from app.ml.runners import load_runner
    from app.tasks.shot_check import LoadedRunners

    loads: list[str] = []

    def loader(name: str) -> Callable[[], Runner]:
        def load() -> Runner:
            loads.append(name)
            folder = tmp_path / f"{name}-{len(loads)}"
            runner = load_runner(extract_package(tfidf_packages[name], folder))
            shutil.rmtree(folder)
            return runner

        return load

    kept = LoadedRunners()
    first, was_loaded = kept.get("sst2", loader("sst2"), capacity=2)
    again, was_loaded_again = kept.get("sst2", loader("sst2"), capacity=2)
    assert (was_loaded, was_loaded_again) == (False, True) and again is first and loads == ["sst2"]
    reviews = few_shot(load_task(datasets_dir, "sst2", "test"), per_class=4, seed=0)
    fresh = load_runner(extract_package(tfidf_packages["sst2"], tmp_path / "fresh"))
    assert (again.predict(reviews.texts).labels == fresh.predict(reviews.texts).labels).all()

    kept.get("trec", loader("trec"), capacity=2)
    kept.get("sst2", loader("sst2"), capacity=2)  # sst2 is now the most recent: trec leaves next
    kept.get("sms_spam", loader("sms_spam"), capacity=2)
    assert len(kept) == 2 and loads == ["sst2", "trec", "sms_spam"]
    kept.get("sst2", loader("sst2"), capacity=2)
    _, trec_kept = kept.get("trec", loader("trec"), capacity=2)
    assert not trec_kept and loads == ["sst2", "trec", "sms_spam", "trec"]

    def broken() -> Runner:
        raise InvalidPackage("model.onnx cannot be read")

    with pytest.raises(InvalidPackage):
        kept.get("broken", broken, capacity=2)
    assert "broken" not in kept
    _, kept_none = LoadedRunners().get("sst2", loader("sst2"), capacity=0)
    assert not kept_none
