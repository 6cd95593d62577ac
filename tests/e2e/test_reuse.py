"""End to end: reuse jobs run by the embedded dock's real worker. Two LoRA learnwares are
merged into a public one that is validated, fitted and indexed, and so are two full
fine-tunes (sequence classifiers of the base); then a user's task is identified
and its top adapter fine-tuned and top two merged into private learnwares only that user sees."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.client import DockAPIError, DockClient
from app.ml.data import few_shot, load_task
from app.reuse.schemas import MergeCreate, Shots, TaskReuseCreate
from tests.e2e.conftest import Processes, start_embedded

pytestmark = pytest.mark.e2e


def test_merge_and_finetune_jobs_register_new_learnwares(
    processes: Processes,
    lora_packages: dict[str, Path],
    linear_packages: dict[str, Path],
    datasets_dir: Path,
    tmp_path: Path,
) -> None:
    dock = start_embedded(processes, tmp_path)
    url, serve = dock.url, dock.serve
    developer, user = dock.key("developer"), dock.key("user")
    other = dock.key("user")

    ids: dict[str, int] = {}
    packages = {**lora_packages, **{f"{name}-full": zip_path for name, zip_path in linear_packages.items()}}
    with DockClient(url, developer) as dev:
        for name, package in packages.items():
            sub = dev.submit(package)
            job = dev.wait(sub.job_id, timeout=600)
            assert job.state.value == "succeeded", f"{job.error}\n{serve.tail()}"
            ids[name] = sub.learnware_id

    shots = few_shot(load_task(datasets_dir, "sst2", "train"), per_class=8, seed=0)
    labelled = Shots(texts=shots.texts, labels=[int(y) for y in shots.labels], label_names=shots.label_names)
    with DockClient(url, user) as client:
        merged = client.merge(
            MergeCreate(learnware_ids=[ids["sst2"], ids["sms_spam"]], method="iso_c", eval=labelled)
        )
        job = client.wait(merged.job_id, timeout=600)
        assert job.state.value == "succeeded", f"{job.error}\n{serve.tail()}"
        assert job.result is not None and job.result["heldout_accuracy"] is not None
        ingest = client.wait(int(job.result["ingest_job_id"]), timeout=600)
        assert ingest.state.value == "succeeded", ingest.error
        merged_lw = client.learnware(int(job.result["learnware_id"]))
        assert merged_lw.status.value == "ready" and merged_lw.label_names == [
            "negative",
            "positive",
            "ham",
            "spam",
        ]

        # Full fine-tunes of the base (sequence classifiers) merge into one whose head is the union.
        merged = client.merge(
            MergeCreate(learnware_ids=[ids["sst2-full"], ids["trec-full"]], method="ties", eval=labelled)
        )
        job = client.wait(merged.job_id, timeout=600)
        assert job.state.value == "succeeded", f"{job.error}\n{serve.tail()}"
        assert job.result is not None and job.result["format"] == "hf-seqcls"
        assert job.result["heldout_accuracy"] is not None and job.result["first_input_accuracy"] is not None
        assert client.wait(int(job.result["ingest_job_id"]), timeout=600).state.value == "succeeded"
        full = client.learnware(int(job.result["learnware_id"]))
        assert full.status.value == "ready" and full.model_format == "hf-seqcls"
        assert full.label_names[:2] == ["negative", "positive"] and len(full.label_names) == 8

        # Identify, then reuse: the task's top adapter fine-tuned and its top two merged, both
        # private, measured on the same held-out shots as the top adapter used as it is.
        submitted = client.task(shots.texts, [int(y) for y in shots.labels], shots.label_names, top_k=5)
        task = client.wait_task(submitted.task_id, timeout=600)
        assert task.status.value == "ready" and task.matches, task.error
        reuse = client.reuse_task(
            task.id, TaskReuseCreate(**labelled.model_dump(), finetune_steps=10, merge_k=2)
        )
        assert reuse.finetune is not None and reuse.merge is not None, reuse.skipped
        private_ids = []
        for choice in (reuse.finetune, reuse.merge):
            job = client.wait(choice.job_id, timeout=600)
            assert job.state.value == "succeeded", f"{job.error}\n{serve.tail()}"
            result = job.result or {}
            assert result["heldout_accuracy"] is not None
            top = result.get("identified_accuracy", result.get("first_input_accuracy"))
            assert top is not None
            assert client.wait(int(result["ingest_job_id"]), timeout=600).state.value == "succeeded"
            private_ids.append(int(result["learnware_id"]))
        assert all(client.learnware(i).status.value == "ready" for i in private_ids)
        private_id = private_ids[0]
        client.download(private_id, tmp_path / "mine.zip")
        assert (tmp_path / "mine.zip").stat().st_size > 0
    with DockClient(url, other) as stranger, pytest.raises(DockAPIError) as refused:
        stranger.learnware(private_id)
    assert refused.value.status == 404
    with DockClient(url, other) as stranger, pytest.raises(DockAPIError) as refused:
        stranger.learnware(private_ids[1])
    assert refused.value.status == 404
