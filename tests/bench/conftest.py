"""The benchmarks' tests: each runs a benchmark's smallest profile, or its pieces, end to end."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch


@pytest.fixture
def single_thread() -> Iterator[None]:
    """Tiny matrices: one thread avoids fork-join overhead and contention on shared hosts."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
