"""End to end on the real second base (opt-in: ``PAVEDOCK_TEST_MPNET=1`` and all-mpnet-base-v2
installed with ``pavedock bases install all-mpnet-base-v2``; not part of the default run, since
MPNet is a 404 MB download and about 5× slower than MiniLM).

The embedded dock's worker moves a MiniLM LoRA learnware onto MPNet with BiCo, calibrated on
labelled shots (a LoRA adapter of MPNet), or with UTD on the same texts unlabelled (its operator
folded into a ``pooled-linear`` map); the result is registered, validated by running it on MPNet,
given its spec in the default space, indexed, and found by a user's task of the same kind.
A developer asks for the transfer: a user key's result would be private, never indexed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from app.client import DockClient
from app.ml.data import few_shot, load_task
from app.ml.errors import UnknownBase
from app.ml.mpnet import MPNET_ALIAS, mpnet_path
from app.reuse.schemas import TransferCreate
from app.settings import Settings
from tests.e2e.conftest import Processes, start_embedded

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(os.environ.get("PAVEDOCK_TEST_MPNET") != "1", reason="opt-in: PAVEDOCK_TEST_MPNET=1"),
]


def _installed_mpnet() -> Path:
    try:
        return mpnet_path(Settings().data_dir).resolve()
    except UnknownBase as exc:
        pytest.skip(str(exc))


@pytest.mark.parametrize(("method", "model_format"), [("bico", "peft-lora"), ("utd", "pooled-linear")])
def test_a_learnware_moves_onto_mpnet_and_is_identified(
    processes: Processes,
    lora_packages: dict[str, Path],
    datasets_dir: Path,
    tmp_path: Path,
    method: str,
    model_format: str,
) -> None:
    installed = _installed_mpnet()
    data_dir = tmp_path / "var"
    (data_dir / "bases").mkdir(parents=True)
    (data_dir / "bases" / MPNET_ALIAS).symlink_to(installed, target_is_directory=True)
    dock = start_embedded(processes, tmp_path, data_dir)
    url, serve = dock.url, dock.serve
    developer, user = dock.key("developer"), dock.key("user")

    with DockClient(url, developer) as dev:
        ids = {}
        for name, package in lora_packages.items():
            sub = dev.submit(package)
            assert dev.wait(sub.job_id, timeout=600).state.value == "succeeded", serve.tail()
            ids[name] = sub.learnware_id

    shots = few_shot(load_task(datasets_dir, "sst2", "train"), per_class=16, seed=1)
    with DockClient(url, developer) as dev:
        body = TransferCreate(
            learnware_id=ids["sst2"],
            target_base=MPNET_ALIAS,
            method=method,
            texts=shots.texts,
            labels=[int(y) for y in shots.labels] if method == "bico" else None,
        )
        job = dev.wait(dev.transfer(body).job_id, timeout=1200)
        assert job.state.value == "succeeded", f"{job.error}\n{serve.tail()}"
        result = job.result or {}
        assert result["method"] == method and result["format"] == model_format
        assert result["transfer_seconds"] > 0
        ingest = dev.wait(int(result["ingest_job_id"]), timeout=1200)
        assert ingest.state.value == "succeeded", f"{ingest.error}\n{serve.tail()}"
    with DockClient(url, user) as client:
        moved = client.learnware(int(result["learnware_id"]))
        assert moved.status.value == "ready" and moved.base_model == MPNET_ALIAS
        assert moved.model_format == model_format
        assert moved.label_names == ["negative", "positive"] and "transferred" in moved.tags

        # A sentiment task finds a sentiment learnware, MiniLM's or MPNet's, before the spam one.
        task = client.wait_task(
            client.task(shots.texts, [int(y) for y in shots.labels], shots.label_names).task_id, timeout=600
        )
        ranked = [m.learnware_id for m in task.matches]
        assert set(ranked) == {ids["sst2"], ids["sms_spam"], moved.id}
        assert ranked[-1] == ids["sms_spam"], task.matches
