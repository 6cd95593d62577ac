"""End to end in the embedded mode: ``pavedock serve`` alone (SQLite, local store, filesystem
broker, its own worker), keys from ``pavedock keys create``, then a restart."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from app.client import DockClient
from app.ml.data import few_shot, load_task
from app.ml.label_maps import map_by_examples, map_cost, reading_nats
from app.ml.packages import extract_package
from app.ml.runners import load_runner
from tests.e2e.conftest import Proc, Processes, pavedock, start_embedded, wait_ready

pytestmark = pytest.mark.e2e


def test_serve_runs_the_dock_on_one_machine(
    processes: Processes, tfidf_packages: dict[str, Path], datasets_dir: Path, tmp_path: Path
) -> None:
    dock = start_embedded(processes, tmp_path)
    url, env, serve = dock.url, dock.env, dock.serve
    assert dock.ready["checks"]["broker"]["transport"] == "filesystem"  # type: ignore[index]
    assert (tmp_path / "var" / "dock.sqlite").is_file()
    developer, user = dock.key("developer"), dock.key("user")

    # The command line on the client: submit and follow a job, post a task computed locally.
    submitted = pavedock(env, "submit", str(tfidf_packages["trec"]), "--url", url, "--key", developer)
    assert "ready" in submitted, submitted
    with DockClient(url, developer) as dev:
        sub = dev.submit(tfidf_packages["sst2"])
        job = dev.wait(sub.job_id, timeout=600)
        assert job.state.value == "succeeded", f"{job.error}\n{serve.tail()}"
        ids = {lw.name.split("-")[0]: lw.id for lw in dev.learnwares(mine=True).items}
    assert set(ids) == {"trec", "sst2"}
    query = few_shot(load_task(datasets_dir, "trec", "test"), per_class=8, seed=2)
    with DockClient(url, user) as client:
        posted = client.task(query.texts, [int(y) for y in query.labels], query.label_names, top_k=2)
        result = client.wait_task(posted.task_id, timeout=300)
        assert result.status.value == "ready", result.error
        assert result.matches[0].learnware_id == ids["trec"]
    # The shot check ran the trec learnware (the only one of the task's label set) on the user's
    # examples before erasing them: its accuracy there, exactly as the model gives it here.
    assert [m.labels_match for m in result.matches] == [True, False]
    assert [m.tier for m in result.matches] == ["labels-by-name", "cannot-answer"]
    assert result.matches[0].checked and result.matches[1].shot_accuracy is None
    assert "right" in result.matches[0].reason and "cannot answer" in result.matches[1].reason
    runner = load_runner(extract_package(tfidf_packages["trec"], tmp_path / "trec-package"))
    assert list(runner.label_names) == list(query.label_names)
    on_examples = runner.predict(query.texts)
    predicted = on_examples.labels
    own_accuracy = result.matches[0].shot_accuracy
    assert own_accuracy == pytest.approx(float(np.mean(predicted == query.labels)))
    assert on_examples.probs is not None
    true_probs = on_examples.probs[np.arange(len(query)), query.labels]
    assert result.matches[0].shot_confidence == pytest.approx(float(np.mean(true_probs)), abs=1e-6)
    # The same examples with codes for label names: no learnware speaks them and codes carry no
    # meaning, so the check runs the one with as many classes (trec's) through the label map that
    # fits the examples best, weighed with the codes read as its class numbers, and says so.
    renamed = [str(i) for i in range(len(query.label_names))]
    with DockClient(url, user) as client:
        posted = client.task(query.texts, [int(y) for y in query.labels], renamed, top_k=2)
        top = client.wait_task(posted.task_id, timeout=300).matches[0]
    numbers = tuple(range(len(renamed)))
    label_map = map_by_examples(
        predicted, on_examples.probs, query.labels, len(renamed), len(renamed), order=numbers
    )
    accuracy = float(np.mean(np.asarray(label_map.model_class)[query.labels] == predicted))
    assert top.learnware_id == ids["trec"] and top.labels_match is False and top.tier == "label-map"
    assert (
        top.shot_accuracy == pytest.approx(accuracy) and own_accuracy is not None and accuracy >= own_accuracy
    )
    assert top.label_map == label_map.names(renamed, list(runner.label_names))
    assert top.label_map_how == "examples" and "your examples" in top.reason
    first_model_label, first_code = next(iter(top.label_map.items()))
    assert f"its {first_model_label!r} is your {first_code!r}" in top.reason  # the map, spelt out
    assert "codes read as its class numbers" in top.reason
    seen = np.unique(query.labels)  # the map is paid for on the labels with examples
    read = reading_nats(np.asarray(label_map.model_class)[seen], np.asarray(numbers)[seen], len(renamed))
    assert top.shot_map_cost == pytest.approx(map_cost(len(seen), len(renamed), len(query), read))
    assert top.shot_map_cost is not None and f"less {top.shot_map_cost:.2f} for the label map" in top.reason
    # Codes numbered otherwise than trec numbers its classes (each shifted round by one): the
    # task's spec is aligned with trec's classes as trec's own spec agrees most, and compared
    # with it under that alignment, not under the numbers; the label map reads the codes counted
    # from trec's last class, as the examples bear out, and says so.
    shifted = [(int(y) + 1) % len(renamed) for y in query.labels]
    with DockClient(url, user) as client:
        posted = client.task(query.texts, shifted, renamed, top_k=2)
        other_numbers = client.wait_task(posted.task_id, timeout=300).matches[0]
    assert other_numbers.learnware_id == ids["trec"] and other_numbers.aligned
    assert "your codes aligned with its classes as its spec agrees most" in other_numbers.reason
    assert f"your codes read as its class numbers counted in order, shifted by {len(renamed) - 1}" in (
        other_numbers.reason
    )
    # Letters read as numbers do, A as trec's class 0, and the same numbering is found.
    letters = [chr(ord("A") + i) for i in range(len(renamed))]
    with DockClient(url, user) as client:
        posted = client.task(query.texts, shifted, letters, top_k=2)
        lettered = client.wait_task(posted.task_id, timeout=300).matches[0]
    assert lettered.learnware_id == ids["trec"] and lettered.aligned
    assert "your codes aligned with its classes as its spec agrees most" in lettered.reason
    assert f"your codes read as its class numbers counted in order, shifted by {len(renamed) - 1}" in (
        lettered.reason
    )
    # Two labels that no learnware names: the task's spec is refitted under the two-class
    # learnware's own names (sst2's), and that learnware is scored under the alignment that fits:
    # the cosine the same examples get from a user who names the classes as it does, whichever
    # way round the codes go.
    reviews = few_shot(load_task(datasets_dir, "sst2", "test"), per_class=8, seed=2)
    reviews_labels = [int(y) for y in reviews.labels]
    with DockClient(url, user) as client:
        named = client.task(reviews.texts, reviews_labels, reviews.label_names, top_k=2, local_spec=True)
        by_name = client.wait_task(named.task_id, timeout=300).matches[0]
        coded_tasks = [
            client.task(reviews.texts, [y if keep else 1 - y for y in reviews_labels], ["0", "1"], top_k=2)
            for keep in (True, False)
        ]
        coded = [client.wait_task(t.task_id, timeout=300).matches[0] for t in coded_tasks]
    assert by_name.learnware_id == ids["sst2"] and not by_name.aligned
    for match in coded:
        assert match.learnware_id == ids["sst2"] and match.aligned and match.tier == "label-map"
        assert match.score == pytest.approx(abs(by_name.score), abs=2e-3)
        assert "refitted under its label names" in match.reason
    assert coded[0].label_map != coded[1].label_map  # the examples read the codes either way round
    # The task posted as a spec only: the dock could not check it, so the client checks its
    # matches here, exactly as the worker would, and re-ranks them; the dock still saw no example.
    with DockClient(url, user) as client:
        spec_only = client.task_result(named.task_id)
        here = client.check_here(spec_only, reviews.texts, reviews_labels)
        with pytest.raises(ValueError, match="already checked"):
            client.check_here(result, query.texts, [int(y) for y in query.labels])
        with pytest.raises(ValueError, match="not one of the label names"):
            client.check_here(spec_only, reviews.texts[:1], ["great"])
    assert spec_only.n_examples == 0 and not any(m.checked for m in spec_only.matches)
    # Both can answer (trec through a map onto two of its six classes), both are run.
    assert here.checked == [ids["sst2"], ids["trec"]] and not here.skipped
    sst2_runner = load_runner(extract_package(tfidf_packages["sst2"], tmp_path / "sst2-package"))
    sst2_accuracy = float(np.mean(sst2_runner.predict(reviews.texts).labels == reviews.labels))
    top_here = here.matches[0]
    assert top_here.learnware_id == ids["sst2"] and top_here.rank == 1 and top_here.checked
    assert top_here.shot_accuracy == pytest.approx(sst2_accuracy)
    assert f"checked on your {len(reviews)} examples" in top_here.reason
    assert [m.tier for m in here.matches] == ["labels-by-name", "label-map"]
    assert here.matches[1].checked and here.matches[1].label_map_how == "examples"
    # Three of trec's six classes under other words: no learnware has these names, their meaning
    # alone does not decide the map, so the examples choose three of trec's classes, priced by the
    # names' reading of that map (they agree with it): less than the uniform price of one of 120.
    subset = {"description": "explanation", "entity": "thing", "location": "place"}
    keep = [i for i, y in enumerate(query.labels) if query.label_names[int(y)] in subset]
    words = list(subset.values())
    picked = [words.index(subset[query.label_names[int(query.labels[i])]]) for i in keep]
    with DockClient(url, user) as client:
        posted = client.task([query.texts[i] for i in keep], picked, words, top_k=2)
        renamed_subset = client.wait_task(posted.task_id, timeout=300).matches[0]
    assert renamed_subset.learnware_id == ids["trec"] and renamed_subset.label_map_how == "examples"
    assert renamed_subset.restricted and renamed_subset.label_map is not None
    assert set(renamed_subset.label_map.values()) == set(words)
    assert renamed_subset.shot_map_cost is not None
    assert math.log(2) / len(keep) < renamed_subset.shot_map_cost < map_cost(3, 6, len(keep))
    assert "its names lean the same way but do not decide it" in renamed_subset.reason
    shots = tmp_path / "shots.jsonl"
    shots.write_text(
        "".join(
            json.dumps({"text": t, "label": query.label_names[int(y)]}) + "\n"
            for t, y in zip(query.texts, query.labels, strict=True)
        )
    )
    names = ",".join(query.label_names)
    ranked = pavedock(
        env, "task", str(shots), "--label-names", names, "--local", "--json", "--url", url, "--key", user
    )
    task = json.loads(ranked)
    # The dock saw only the spec; the command checked the matches on the examples here.
    assert task["n_examples"] == 0 and task["matches"][0]["learnware_id"] == ids["trec"]
    assert task["matches"][0]["checked"] and task["matches"][0]["shot_accuracy"] == pytest.approx(
        own_accuracy
    )
    pavedock(env, "download", str(ids["trec"]), "--out", str(tmp_path), "--url", url, "--key", user)
    assert (tmp_path / f"learnware-{ids['trec']}.zip").read_bytes() == tfidf_packages["trec"].read_bytes()

    # A restart of the whole embedded dock keeps the market and the index.
    serve.stop()
    serve = processes.start(Proc("serve", dock.serve_args, env, tmp_path / "serve-2.log"))
    index = wait_ready(url, serve)["checks"]["index"]  # type: ignore[index]
    assert index["size"] == 2 and index["source"] == "file"
    with DockClient(url, user) as client:
        assert {lw.id for lw in client.learnwares().items} == set(ids.values())

    # `pavedock bench tasks` times few-shot tasks through this API, named and with codes.
    out = tmp_path / "tasks.json"
    pavedock(
        env,
        "bench",
        "tasks",
        "--tasks",
        "trec",
        "--seeds",
        "1",
        "--out",
        str(out),
        "--url",
        url,
        "--key",
        user,
    )
    timed = json.loads(out.read_text())
    assert [(t["task"], t["names"]) for t in timed["timings"]] == [("trec", "own names"), ("trec", "codes")]
    assert all(
        t["seconds"] > 0 and t["top1"].startswith("trec") and t["checked"] >= 1 for t in timed["timings"]
    )
    assert set(timed["by_kind"]) == {"own names", "codes"} and out.with_suffix(".md").is_file()
