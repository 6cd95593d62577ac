"""End to end: a UTD transfer through the API ends as a learnware like any other.

The embedded dock's worker moves a MiniLM LoRA learnware (sst2) onto the second base with UTD,
from a few unlabelled texts; its operator, folded into a linear map after the target's pooling,
is registered as a ``pooled-linear`` learnware, validated by running it on the target, given
its spec in the dock's space, indexed, ranked by a user's sentiment task ahead of the spam
learnware, and downloaded by that user, who runs it as the dock does.

The second base is a small MPNet built in the test (``make_small_mpnet``: MiniLM's vocabulary
and token embeddings, one random layer) installed where ``pavedock bases install
all-mpnet-base-v2`` puts the real one, so the test needs no 400 MB download; the real pair runs
in ``test_transfer_mpnet.py`` (opt-in).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from app.client import DockClient
from app.ml import bases
from app.ml.data import few_shot, load_task
from app.ml.mpnet import MPNET_ALIAS, model_dir
from app.ml.packages import extract_package
from app.reuse.schemas import TransferCreate
from tests.e2e.conftest import Processes, start_embedded
from tests.fixtures.tiny_bases import make_small_mpnet

pytestmark = pytest.mark.e2e


def test_a_utd_transfer_is_registered_ranked_and_downloaded(
    processes: Processes, lora_packages: dict[str, Path], datasets_dir: Path, tmp_path: Path
) -> None:
    data_dir = tmp_path / "var"
    make_small_mpnet(model_dir(data_dir))
    dock = start_embedded(processes, tmp_path, data_dir)
    url, serve = dock.url, dock.serve
    developer, user = dock.key("developer"), dock.key("user")

    ids: dict[str, int] = {}
    with DockClient(url, developer) as dev:
        for name, package in lora_packages.items():
            sub = dev.submit(package)
            assert dev.wait(sub.job_id, timeout=600).state.value == "succeeded", serve.tail()
            ids[name] = sub.learnware_id
        # UTD needs no labels: the learnware's own answers on the texts make its descriptor.
        shots = few_shot(load_task(datasets_dir, "sst2", "train"), per_class=16, seed=1)
        body = TransferCreate(
            learnware_id=ids["sst2"], target_base=MPNET_ALIAS, method="utd", texts=shots.texts
        )
        job = dev.wait(dev.transfer(body).job_id, timeout=600)
        assert job.state.value == "succeeded", f"{job.error}\n{serve.tail()}"
        result = job.result or {}
        assert result["method"] == "utd" and result["format"] == "pooled-linear", result
        assert result["stats"]["probes"] == len(shots.texts) and result["stats"]["descriptor_norm"] > 0
        ingest = dev.wait(int(result["ingest_job_id"]), timeout=600)
        assert ingest.state.value == "succeeded", f"{ingest.error}\n{serve.tail()}"

    with DockClient(url, user) as client:
        moved = client.learnware(int(result["learnware_id"]))
        assert moved.status.value == "ready" and moved.model_format == "pooled-linear"
        assert moved.base_model == MPNET_ALIAS and moved.label_names == ["negative", "positive"]
        assert "transferred" in moved.tags
        assert moved.space_id == client.learnware(ids["sst2"]).space_id  # fitted where tasks are ranked
        assert moved.lineage == {
            "kind": "transfer",
            "from": [ids["sst2"]],
            "method": "utd",
            "target_base": MPNET_ALIAS,
        }

        # A sentiment task ranks both sentiment learnwares, MiniLM's and the moved one, before spam.
        task = client.wait_task(
            client.task(shots.texts, [int(y) for y in shots.labels], shots.label_names).task_id, timeout=600
        )
        ranked = [m.learnware_id for m in task.matches]
        assert set(ranked) == {ids["sst2"], ids["sms_spam"], moved.id}, task.matches
        assert ranked[-1] == ids["sms_spam"], task.matches
        match = next(m for m in task.matches if m.learnware_id == moved.id)
        assert match.shot_accuracy is not None  # the worker ran it on the user's examples

        # The user downloads it and runs it as the dock does: safetensors and a manifest, no code.
        zip_path = client.download(moved.id, tmp_path / "moved.zip")
        assert client.learnware(moved.id).download_count == 1
    package = extract_package(zip_path, tmp_path / "moved")
    assert package.manifest.model_format == "pooled-linear" and package.manifest.base_model == MPNET_ALIAS
    assert sorted(p.name for p in (package.root / "linear").iterdir()) == ["linear.safetensors"]
    before = bases.data_dir()
    bases.use_data_dir(data_dir)
    try:
        from app.ml.runners import load_runner

        predictions = load_runner(package).predict(shots.texts[:8])
    finally:
        bases.use_data_dir(before)
    assert predictions.probs is not None and predictions.probs.shape == (8, 2)
