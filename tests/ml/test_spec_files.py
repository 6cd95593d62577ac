"""Spec files are read from a checked header: a shape whose element count overflows 64 bits, or
one its bytes do not hold, is refused in words before anything is allocated."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from app.ml.errors import IncompatibleSpec
from app.ml.pave import PaveSpec, read_spec_file


def write_raw_spec(stem: Path, shape: list[int], data: bytes) -> Path:
    header = {
        "__metadata__": {"space_id": "pave-test"},
        "pave": {"dtype": "F32", "shape": shape, "data_offsets": [0, len(data)]},
    }
    text = json.dumps(header).encode()
    stem.with_suffix(".safetensors").write_bytes(len(text).to_bytes(8, "little") + text + data)
    stem.with_suffix(".json").write_text(json.dumps({"space_id": "pave-test", "kind": "task", "meta": {}}))
    return stem


@pytest.mark.parametrize(
    ("shape", "data", "match"),
    [
        ([2**32, 2**32], b"", "over the limit"),  # wraps to 0 elements in 64-bit arithmetic
        ([2**31, 2**31, 4], b"", "over the limit"),
        ([4], bytes(8), "needs 16 bytes"),
    ],
)
def test_lying_spec_headers_are_refused(tmp_path: Path, shape: list[int], data: bytes, match: str) -> None:
    stem = write_raw_spec(tmp_path / "spec", shape, data)
    with pytest.raises(IncompatibleSpec, match=match):
        read_spec_file(stem.with_suffix(".safetensors"))
    with pytest.raises(IncompatibleSpec, match=match):
        PaveSpec.load(stem)


def test_an_honest_spec_file_is_read(tmp_path: Path) -> None:
    vector = np.arange(1, 5, dtype=np.float32)
    stem = write_raw_spec(tmp_path / "spec", [4], vector.tobytes())
    uploaded = read_spec_file(stem.with_suffix(".safetensors"))
    assert uploaded.space_id == "pave-test"
    np.testing.assert_array_equal(uploaded.vector, vector)
    np.testing.assert_array_equal(PaveSpec.load(stem).vector, vector)
