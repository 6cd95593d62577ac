"""Measuring a streaming merge's time and peak memory, in this process and in a fresh one."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file

from app.ml.merging.measure import measure_in_fresh_process

PROBE = """
import time, torch
from app.ml.merging.measure import peak_memory
with peak_memory() as memory:
    block = torch.ones(64 * 2**20 // 4)
    block += 1
    time.sleep(0.1)
    del block
print(memory["growth"])
"""


def test_peak_memory_sees_an_allocation() -> None:
    # In a fresh interpreter, as the benchmark measures: in this long-lived test process the
    # allocator may serve the block from memory earlier tests freed, and RSS would not move.
    out = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, check=True, timeout=120
    )
    assert int(out.stdout.strip().splitlines()[-1]) >= 60 * 2**20


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
