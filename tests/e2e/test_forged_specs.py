"""Trust in the ranking: junk learnwares that upload a copy of a good learnware's spec do not take
its users' first place, and users are told which specs the dock did not fit itself."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from app.client import DockClient
from app.ml.data import TextTask, few_shot, load_task
from tests.e2e.conftest import Processes, start_embedded

pytestmark = pytest.mark.e2e

JUNK = 10


def _junk_packages(datasets_dir: Path, out: Path) -> list[Path]:
    """Distinct real models of the spam task trained on labels drawn at random: they answer
    "ham"/"spam" as the good one does, and are no better than chance."""
    from app.bench.builders import train_tfidf_onnx_learnware

    train = load_task(datasets_dir, "sms_spam", "train", limit=600, seed=0)
    packages = []
    for seed in range(JUNK):
        labels = np.random.default_rng(seed).integers(0, 2, len(train))
        noise = TextTask(train.name, train.split, train.texts, labels, train.label_names)
        packages.append(
            train_tfidf_onnx_learnware(noise, out / f"junk-{seed}.zip", seed=seed, name=f"spam-junk-{seed}")
        )
    return packages


def test_a_flood_of_copied_specs_does_not_displace_the_good_learnware(
    processes: Processes, tfidf_packages: dict[str, Path], datasets_dir: Path, tmp_path: Path
) -> None:
    from app.ml.learnware_spec import spec_for_package
    from app.ml.spec_space import load_space

    # Uploaded specs trusted (the dock's default refits them): the hardest case for the ranking.
    # The dock fits the good learnware's spec on as many inputs as the attacker's copy was.
    trusted = {
        "PAVEDOCK_RECOMPUTE_UPLOADED_SPECS": "false",
        "PAVEDOCK_SPEC_FIT_INPUTS": "256",
        "PAVEDOCK_VALIDATION_INPUTS": "256",
    }
    dock = start_embedded(processes, tmp_path, extra_env=trusted)
    developer, attacker, user = dock.key("developer"), dock.key("developer"), dock.key("user")
    good_zip = tfidf_packages["sms_spam"]
    copied = spec_for_package(load_space(), good_zip).save(tmp_path / "copied")[0]
    with DockClient(dock.url, developer) as dev:
        good = dev.submit(good_zip)
        assert dev.wait(good.job_id, timeout=600).state.value == "succeeded"
    with DockClient(dock.url, attacker) as bad:
        jobs = [
            bad.submit(zip_path, spec=copied).job_id for zip_path in _junk_packages(datasets_dir, tmp_path)
        ]
        assert all(bad.wait(job, timeout=600).state.value == "succeeded" for job in jobs)

    query = few_shot(load_task(datasets_dir, "sms_spam", "test"), per_class=8, seed=1)
    with DockClient(dock.url, user) as client:
        posted = client.task(query.texts, [int(y) for y in query.labels], query.label_names, top_k=JUNK + 1)
        few = client.wait_task(posted.task_id, timeout=300)
        spec_only = client.wait_task(
            client.task(
                query.texts,
                [int(y) for y in query.labels],
                query.label_names,
                top_k=JUNK + 1,
                local_spec=True,
            ).task_id,
            timeout=300,
        )
    assert few.status.value == "ready", few.error
    top = few.matches[0]
    assert top.learnware_id == good.learnware_id and top.checked and top.spec_recomputed is True
    junk = [m for m in few.matches if m.learnware_id != good.learnware_id]
    assert len(junk) == JUNK and all(m.spec_recomputed is False for m in junk)
    # The copies share one cluster with the good learnware's spec: at most one more of them was
    # checked, and a checked one no better than chance is ranked after the unchecked ones that
    # answer by name.
    assert all(m.shot_accuracy is None or m.shot_accuracy < top.shot_accuracy for m in junk)
    # Spec-only users get no shot check; equal cosines go to the oldest learnware, and every
    # match says whether its spec was fitted by the dock.
    assert spec_only.status.value == "ready", spec_only.error
    assert spec_only.matches[0].learnware_id == good.learnware_id
    assert [m.spec_recomputed for m in spec_only.matches] == [True] + [False] * JUNK
    # The dock marks the copies (to few-shot and spec-only users alike), and says so.
    for result in (few, spec_only):
        marked = [m for m in result.matches if m.spec_copy_of is not None]
        assert {m.learnware_id for m in marked} == {m.learnware_id for m in junk}
        assert all(m.spec_copy_of == good.learnware_id for m in marked)
        assert all(f"near-identical to learnware {good.learnware_id}'s" in m.reason for m in marked)
        assert result.matches[0].spec_copy_of is None
    # Checked on the user's own machine (`pavedock task --local`): one of each group of copies is
    # run, as in the dock's own check, so the ten junk copies take no place of the check.
    with DockClient(dock.url, user) as client:
        here = client.check_here(spec_only, query.texts, [int(y) for y in query.labels])
    assert here.checked == [good.learnware_id] and not here.skipped
    assert here.matches[0].learnware_id == good.learnware_id and here.matches[0].checked
    assert not any(m.checked for m in here.matches[1:])
