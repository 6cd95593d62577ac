"""Time and peak memory of a streaming merge, measured in a fresh interpreter.

A merge's memory is read as the growth of the process's anonymous resident memory (heap and
tensors; not the file pages safetensors maps), sampled every 2 ms. Each measurement runs in its
own interpreter, started with `python -c`, so memory freed by an earlier merge cannot hide a later
one's peak, and the caller's `__main__` is not re-imported (as multiprocessing's spawn would do).
This module imports only torch and the merging package, so the child starts quickly.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import torch

from app.ml.merging.driver import merge_into_safetensors
from app.ml.merging.sources import SafetensorsSource

SAMPLE_SECONDS = 0.002
_RESULT = "RESULT "


def anonymous_rss() -> int:
    """Resident anonymous memory of this process in bytes (Linux); elsewhere its whole RSS."""
    try:
        with Path("/proc/self/status").open() as status:
            for line in status:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    import psutil

    return int(psutil.Process().memory_info().rss)


@contextmanager
def peak_memory() -> Iterator[dict[str, int]]:
    """Sample anonymous RSS in a thread; the yielded dict gets `start`, `peak` and `growth`."""
    record = {"start": anonymous_rss()}
    record["peak"] = record["start"]
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            record["peak"] = max(record["peak"], anonymous_rss())
            stop.wait(SAMPLE_SECONDS)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        yield record
    finally:
        stop.set()
        sampler.join()
        record["peak"] = max(record["peak"], anonymous_rss())
        record["growth"] = record["peak"] - record["start"]


def measure_streaming_merge(
    base_path: str, finetuned_paths: list[str], method: str, params: Mapping[str, object], out_path: str
) -> dict[str, float]:
    """Seconds and peak anonymous-memory growth of one streaming merge into a safetensors file."""
    base = SafetensorsSource(base_path)
    finetuned = [SafetensorsSource(path) for path in finetuned_paths]
    with peak_memory() as memory:
        start = time.perf_counter()
        stats = merge_into_safetensors(base, finetuned, method, params, out_path)
        seconds = time.perf_counter() - start
    Path(out_path).unlink()
    return {
        "seconds": seconds,
        "peak_memory_bytes": float(memory["growth"]),
        "merged_tensors": float(stats.merged + stats.averaged),
    }


def _child_main() -> None:
    """Entry point of the measuring interpreter: a JSON request on stdin, one result line on stdout."""
    request = json.loads(sys.stdin.read())
    torch.set_num_threads(int(request["threads"]))
    result = measure_streaming_merge(
        request["base"], request["finetuned"], request["method"], request["params"], request["out"]
    )
    print(_RESULT + json.dumps(result), flush=True)


def measure_in_fresh_process(
    base_path: Path,
    finetuned_paths: list[Path],
    method: str,
    params: Mapping[str, object],
    threads: int | None = None,
) -> dict[str, float]:
    """`measure_streaming_merge` in a fresh interpreter; the merged file goes to a temporary folder."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(path for path in sys.path if path))
    with tempfile.TemporaryDirectory(dir=base_path.parent) as scratch, tempfile.TemporaryFile("w+") as errors:
        request = {
            "base": str(base_path),
            "finetuned": [str(path) for path in finetuned_paths],
            "method": method,
            "params": dict(params),
            "out": str(Path(scratch) / "merged.safetensors"),
            "threads": threads or torch.get_num_threads(),
        }
        completed = subprocess.run(
            [sys.executable, "-c", "from app.ml.merging.measure import _child_main; _child_main()"],
            input=json.dumps(request),
            stdout=subprocess.PIPE,
            stderr=errors,
            text=True,
            env=env,
            check=False,
        )
        lines = [line for line in completed.stdout.splitlines() if line.startswith(_RESULT)]
        if completed.returncode != 0 or not lines:
            errors.seek(0)
            raise RuntimeError(f"measuring the {method} merge failed:\n{errors.read()[-4000:]}")
    result: dict[str, float] = json.loads(lines[-1][len(_RESULT) :])
    return result
