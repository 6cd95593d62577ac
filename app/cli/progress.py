"""Progress bars for long CLI operations, fed by the ML core's (done, total, message) callbacks."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from tqdm import tqdm

from app.ml.progress import Progress


@contextmanager
def progress_bar(description: str) -> Iterator[Progress]:
    bar = tqdm(desc=description, unit="step", dynamic_ncols=True)

    def report(done: int, total: int, message: str) -> None:
        bar.total = total
        bar.n = done
        bar.set_postfix_str(message, refresh=False)
        bar.refresh()

    try:
        yield report
    finally:
        bar.close()
