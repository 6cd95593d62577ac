"""Progress bars for long CLI operations, fed by the ML core's (done, total, message) callbacks."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from tqdm import tqdm

from app.ml.progress import Progress


@contextmanager
def progress_bar(description: str, unit: str = "step") -> Iterator[Progress]:
    """A bar drawn from the first report on: an operation that fails or ends first draws none."""
    bars: list[tqdm] = []
    # A job's percent has no rate worth showing (one that was done already reads millions of %/s).
    layout = "{l_bar}{bar}| [{elapsed}{postfix}]" if unit == "%" else None

    def report(done: int, total: int, message: str) -> None:
        if not bars:
            bars.append(tqdm(desc=description, unit=unit, dynamic_ncols=True, total=total, bar_format=layout))
        bar = bars[0]
        bar.total = total
        bar.n = done
        bar.set_postfix_str(message, refresh=False)
        bar.refresh()

    try:
        yield report
    finally:
        for bar in bars:
            bar.close()
