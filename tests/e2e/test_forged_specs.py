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


def _junk_packages(datasets_dir: Path, out: Path, count: int = JUNK) -> list[Path]:
    """Distinct real models of the spam task trained on labels drawn at random: they answer
    "ham"/"spam" as the good one does, and are no better than chance."""
    from app.bench.builders import train_tfidf_onnx_learnware

    train = load_task(datasets_dir, "sms_spam", "train", limit=600, seed=0)
    packages = []
    for seed in range(count):
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


def test_a_spec_only_user_gets_the_close_matches_the_others_bear_out_first(
    processes: Processes, tfidf_packages: dict[str, Path], datasets_dir: Path, tmp_path: Path
) -> None:
    """No examples reach the dock, so no shot check: the spam learnwares that answer the user's
    labels by name are run on their pooled declared inputs, and the ones the others agree with
    most (Cohen's κ) come first. Two trained on random labels agree with nobody, whatever their
    cosine, and come after the good one and a weaker one trained on a few dozen messages."""
    from app.bench.builders import train_tfidf_onnx_learnware

    dock = start_embedded(processes, tmp_path)
    developer, user = dock.key("developer"), dock.key("user")
    few = load_task(datasets_dir, "sms_spam", "train", limit=60, seed=3)
    small = train_tfidf_onnx_learnware(few, tmp_path / "small.zip", name="spam-small")
    zips = [tfidf_packages["sms_spam"], small, *_junk_packages(datasets_dir, tmp_path, count=2)]
    with DockClient(dock.url, developer) as dev:
        jobs = [dev.submit(zip_path) for zip_path in zips]
        assert all(dev.wait(j.job_id, timeout=600).state.value == "succeeded" for j in jobs)
    good, weak, *junk = (j.learnware_id for j in jobs)

    query = few_shot(load_task(datasets_dir, "sms_spam", "test"), per_class=8, seed=1)
    with DockClient(dock.url, user) as client:
        posted = client.task(
            query.texts, [int(y) for y in query.labels], query.label_names, top_k=4, local_spec=True
        )
        result = client.wait_task(posted.task_id, timeout=300)
        job = client.wait(posted.job_id, timeout=60)
    assert result.status.value == "ready", result.error
    assert result.n_examples == 0 and not any(m.checked for m in result.matches)
    scores = [m.agreement for m in result.matches]
    assert all(s is not None for s in scores) and scores == sorted(scores, reverse=True)  # type: ignore[type-var]
    assert {m.learnware_id for m in result.matches[:2]} == {good, weak}
    assert {m.learnware_id for m in result.matches[2:]} == set(junk)
    assert all(abs(m.agreement or 0.0) < 0.2 for m in result.matches[2:])
    assert all("κ" in m.reason and "no examples of yours" in m.reason for m in result.matches)
    assert job.state.value == "succeeded"
    assert any("agreement check: 4 of 4 close matches run on" in line for line in job.log), job.log
    # `pavedock bench tasks --spec-only` times such a task beside the few-shot ones.
    from app.bench.task_latency import run_task_latency

    timed = run_task_latency(
        dock.url, user, datasets_dir, tmp_path / "latency.json", tasks=("sms_spam",), seeds=1, spec_only=True
    )
    assert set(timed["by_kind"]) == {"own names", "codes", "spec only"}
    spec_only_timing = next(t for t in timed["timings"] if t["names"] == "spec only")
    assert spec_only_timing["checked"] == 4 and spec_only_timing["seconds"] > 0


def test_the_checked_matches_agreement_weighs_in_on_their_order(
    processes: Processes, tfidf_packages: dict[str, Path], datasets_dir: Path, tmp_path: Path
) -> None:
    """Two spam messages (one of each label) barely tell a good spam model from two trained on 60
    messages each. The worker runs the three checked models on their pooled declared inputs,
    through the maps their check chose, and orders them by their score on the examples plus
    their agreement with one another (Cohen's κ): the good model, which the others bear out
    most, first; every weighed match says why."""
    from app.bench.builders import train_tfidf_onnx_learnware

    dock = start_embedded(processes, tmp_path)
    developer, user = dock.key("developer"), dock.key("user")
    smalls = [
        train_tfidf_onnx_learnware(
            load_task(datasets_dir, "sms_spam", "train", limit=60, seed=seed),
            tmp_path / f"small-{seed}.zip",
            name=f"spam-small-{seed}",
        )
        for seed in (3, 4)
    ]
    with DockClient(dock.url, developer) as dev:
        jobs = [dev.submit(zip_path) for zip_path in [tfidf_packages["sms_spam"], *smalls]]
        assert all(dev.wait(j.job_id, timeout=600).state.value == "succeeded" for j in jobs)
    good = jobs[0].learnware_id

    query = few_shot(load_task(datasets_dir, "sms_spam", "test"), per_class=1, seed=5)
    with DockClient(dock.url, user) as client:
        posted = client.task(query.texts, [int(y) for y in query.labels], query.label_names, top_k=3)
        result = client.wait_task(posted.task_id, timeout=300)
        job = client.wait(posted.job_id, timeout=60)
    assert result.status.value == "ready", result.error
    assert all(m.checked and m.agreement_weighed for m in result.matches)
    weighed = [
        (m.shot_log_likelihood or 0.0) - (m.shot_map_cost or 0.0) + (m.agreement or 0.0)
        for m in result.matches
    ]
    assert all(m.agreement is not None for m in result.matches) and weighed == sorted(weighed, reverse=True)
    assert result.matches[0].learnware_id == good
    assert all("which is added to its score" in m.reason for m in result.matches)
    assert any("agreement check: 3 of 3 checked matches run on" in line for line in job.log), job.log
