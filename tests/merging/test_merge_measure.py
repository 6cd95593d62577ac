"""Measuring a streaming merge's time and peak memory, in this process and in a fresh one."""

from __future__ import annotations

import time
from pathlib import Path

import torch
from safetensors.torch import save_file

from app.ml.merging.measure import measure_in_fresh_process, peak_memory


def test_peak_memory_sees_an_allocation() -> None:
    # 64 MiB is above glibc's largest mmap threshold (32 MiB), so the block is fresh pages rather
    # than memory an earlier test freed; the sleep lets the sampler thread run while it lives.
    with peak_memory() as memory:
        block = torch.ones(64 * 2**20 // 4)
        block += 1
        time.sleep(0.1)
        del block
    assert memory["growth"] >= 48 * 2**20


def test_a_merge_is_measured_in_a_fresh_process(tmp_path: Path) -> None:
    generator = torch.Generator().manual_seed(0)
    base = {"w": torch.randn(64, 32, generator=generator), "b": torch.randn(32, generator=generator)}
    save_file(base, str(tmp_path / "base.safetensors"))
    paths = []
    for index in range(3):
        tuned = {
            name: tensor + 0.1 * torch.randn(tensor.shape, generator=generator)
            for name, tensor in base.items()
        }
        paths.append(tmp_path / f"tuned{index}.safetensors")
        save_file(tuned, str(paths[-1]))
    result = measure_in_fresh_process(
        tmp_path / "base.safetensors", paths, "iso_c", {"pact": True}, threads=1
    )
    assert result["merged_tensors"] == 2.0
    assert result["seconds"] > 0 and result["peak_memory_bytes"] >= 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["base.safetensors", *(p.name for p in paths)]
