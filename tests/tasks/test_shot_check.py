"""How a ranked task reads in the CLI, and the models a worker keeps and warms up for the shot check
(the worker's shot check runs in tests/e2e/test_embedded.py; its rules in tests/pave/test_ranking.py)."""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from app.ml.errors import InvalidPackage
from app.runtime import Runtime
from app.settings import Settings
from tests.fixtures.service import Keys, add_ready_learnware

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


def test_the_cli_shows_a_spec_only_tasks_agreement(capsys: pytest.CaptureFixture[str]) -> None:
    from app.cli.common import print_matches
    from app.tasks.schemas import MatchRead

    common = {
        "task_type": "text-classification",
        "model_format": "onnx",
        "tags": [],
        "label_names": ["a", "b"],
    }
    print_matches(
        [
            MatchRead(
                rank=1, learnware_id=2, score=0.32, name="good", agreement=0.64, reason="κ 0.64", **common
            ),
            MatchRead(rank=2, learnware_id=1, score=0.34, name="weak", agreement=0.21, **common),
        ]
    )
    out = capsys.readouterr().out
    assert "not run; κ 0.64" in out and "not run; κ 0.21" in out and "agree with one another" in out
    # Checked matches whose agreement weighed in on their order: the κ, beside the accuracy.
    print_matches(
        [
            MatchRead(
                rank=1, learnware_id=2, score=0.32, name="good", checked=True, shot_accuracy=0.75,
                agreement=0.58, agreement_weighed=True, reason="κ 0.58, which is added to its score", **common,
            ),
            MatchRead(rank=2, learnware_id=1, score=0.34, name="weak", checked=True, shot_accuracy=1.0, **common),
        ]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert "75%; κ 0.58" in out and "100%" in out and "the first five by that score plus" in out


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


def test_a_worker_warms_up_the_models_recent_tasks_checked_most(
    runtime: Runtime,
    client: TestClient,
    keys: Keys,
    space: tuple[str, int],
    tfidf_packages: dict[str, Path],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """`warm_up`: the ready learnwares the latest tasks checked most are loaded into the process's
    models (most checked first, a tie to the newest), none that was only listed, none no longer
    ready; one whose package does not load is skipped with a log line; a second warm-up loads
    nothing again."""
    from app.db.models import ApiKey, Learnware, LearnwareStatus, TaskStatus, UserTask
    from app.tasks import shot_check

    space_id, dim = space
    with runtime.db.session() as session:
        me = session.scalars(select(ApiKey).where(ApiKey.name == "developer")).one().id
        user = session.scalars(select(ApiKey).where(ApiKey.name == "user")).one().id
    rng = np.random.default_rng(0)
    ids = {
        n: add_ready_learnware(runtime, me, n, np.sign(rng.standard_normal(dim)))
        for n in ("sst2", "trec", "gone", "broken", "listed")
    }
    digests = {n: runtime.store.put_file(tfidf_packages[n]) for n in ("sst2", "trec")}
    with runtime.db.session() as session:
        for name, sha in digests.items():
            session.get(Learnware, ids[name]).package_sha256 = sha
        session.get(Learnware, ids["gone"]).status = LearnwareStatus.failed

    def match(name: str, checked: bool) -> dict[str, object]:
        return {"learnware_id": ids[name], "name": name, "checked": checked}

    tasks = [  # oldest first
        [match("trec", True), match("gone", True), match("listed", False)],
        [match("broken", True), match("sst2", True), match("listed", False)],
        [match("sst2", True), match("gone", True), match("listed", False)],
    ]
    with runtime.db.session() as session:
        for i, results in enumerate(tasks):
            session.add(
                UserTask(
                    owner_id=user,
                    status=TaskStatus.ready,
                    label_names=["a", "b"],
                    n_examples=4,
                    space_id=space_id,
                    results=results,
                    identified_at=datetime(2026, 12, 1, 10, i, tzinfo=UTC),
                )
            )
    with runtime.db.session() as session:
        # sst2 twice; broken (newer) before trec; gone is not ready, listed never checked.
        assert shot_check.most_checked(session, 10) == [digests["sst2"], "0" * 64, digests["trec"]]
        assert shot_check.most_checked(session, 1) == [digests["sst2"]]

    monkeypatch.setattr(shot_check, "LOADED", shot_check.LoadedRunners())
    with caplog.at_level(logging.WARNING, logger="app.tasks.shot_check"):
        assert shot_check.warm_up(runtime, count=10) == 2
    assert digests["sst2"] in shot_check.LOADED and digests["trec"] in shot_check.LOADED
    assert len(shot_check.LOADED) == 2 and "warm-up skipped package 000000000000" in caplog.text
    assert shot_check.warm_up(runtime, count=10) == 0  # already loaded
    # Never more than the process keeps, and none when turned off.
    monkeypatch.setattr(shot_check, "LOADED", shot_check.LoadedRunners())
    runtime.settings.shot_check_loaded_models = 1
    assert shot_check.warm_up(runtime, count=10) == 1 and len(shot_check.LOADED) == 1
    runtime.settings.shot_check_warm_models = 0
    assert shot_check.warm_up(runtime) == 0


def test_only_a_worker_that_runs_the_shot_check_warms_up(settings: Settings) -> None:
    from workers.celery_app import make_celery
    from workers.tasks import checks_tasks

    """The check runs in the stage that fits a few-shot task's spec (the ``gpu`` queue)."""
    both, gpu, cpu = make_celery(settings), make_celery(settings), make_celery(settings)
    gpu.amqp.queues.select(["gpu"])
    cpu.amqp.queues.select(["cpu"])
    assert checks_tasks(both) and checks_tasks(gpu) and not checks_tasks(cpu)
    both.amqp.queues.select(["gpu", "cpu"])
    assert checks_tasks(both)


def test_a_worker_remembers_what_its_models_answered_on_declared_inputs() -> None:
    """`RememberedAnswers`: a model runs only on the texts it has not answered yet, the answers
    come back in the order asked (repeats included), and the least recently used go first."""
    from app.ml.runners.base import Runner
    from app.ml.shot_check import RememberedAnswers

    class Counting(Runner):
        def __init__(self) -> None:
            super().__init__(["ham", "spam"])
            self.seen: list[str] = []

        def _predict(self, texts: list[str], batch_size: int) -> tuple[np.ndarray, np.ndarray | None]:
            self.seen.extend(texts)
            spam = np.array([float("win" in t) for t in texts])
            return spam.astype(np.int64), np.stack([1 - spam * 0.8 - 0.1, spam * 0.8 + 0.1], axis=1)

    runner, memo = Counting(), RememberedAnswers(capacity=3)
    first = memo.predict("sha-a", runner, ["hello", "win cash"])
    assert first.labels.tolist() == [0, 1] and first.probs is not None and first.probs.shape == (2, 2)
    again = memo.predict("sha-a", runner, ["win cash", "lunch?", "hello", "win cash"])
    assert runner.seen == ["hello", "win cash", "lunch?"]  # only the new text ran
    assert again.labels.tolist() == [1, 0, 0, 1] and again.probs is not None
    assert np.allclose(again.probs[0], first.probs[1]) and len(memo) == 3
    # Another model's answers are its own; the capacity holds, the least recently used leave.
    memo.predict("sha-b", runner, ["hello"])
    assert len(memo) == 3 and runner.seen[-1] == "hello"
    memo.predict("sha-a", runner, ["lunch?", "hello", "win cash"])
    assert runner.seen[-1] == "win cash"  # the oldest of sha-a's, dropped for sha-b's, ran again
