"""Benchmark of identification through the API: ``pavedock bench service``.

For each index size a fresh dock (SQLite, local store) is filled with that many ready
learnwares whose specs are **synthetic** random vectors of the default space's real dimension
(training 100,000 real learnwares is not the point: the index and the API path are). The index
file is written the way an API process writes it, a real uvicorn process loads it, and
``POST /v1/identify`` (a spec upload, ranked from the API process's FAISS index) is timed under
1…N concurrent HTTP clients. FAISS search alone is timed in-process on the same index, so the
report separates the index's share from HTTP, upload parsing, auth and the database.
"""

from __future__ import annotations

import contextlib
import gc
import io
import json
import os
import platform
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import faiss
import httpx
import numpy as np
from rich.console import Console
from safetensors.numpy import save

from app.bench.report import percentile

CHUNK = 5000
ROOT = Path(__file__).resolve().parents[2]
FLOAT_SPACES = [{"recipe": {"steps": 0, "balanced": False}}]
"""The space this benchmark runs in: the one-gradient spec without class balance and sign, whose
values are continuous, so the dock indexes it with the flat float32 ``SpecIndex`` this page
measures (the default, signed recipe is served by the binary index: ``bench scale``)."""


@dataclass
class Point:
    size: int
    clients: int
    requests: int
    errors: int
    p50_ms: float
    p90_ms: float
    p99_ms: float
    mean_ms: float
    requests_per_s: float


@dataclass
class SizeResult:
    size: int
    dim: int
    index_bytes: int
    build_s: float
    api_load_s: float
    faiss_search_p50_ms: float
    points: list[Point] = field(default_factory=list)


def _first_to_go() -> None:
    """Make this process the out-of-memory killer's first choice (a benchmark holding a large
    index must not push a neighbour's work out of memory)."""
    with contextlib.suppress(OSError):
        Path("/proc/self/oom_score_adj").write_text("1000")


def _mem_available() -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _default_dim() -> int:
    from app.ml.spec_space import load_space
    from app.settings import Settings

    return load_space(Settings().space_configs[0]).dim


def _spec_bytes(space_id: str, vector: np.ndarray) -> bytes:
    return save({"pave": vector.astype(np.float32)}, metadata={"space_id": space_id})


def _prepare(data_dir: Path, size: int, seed: int) -> tuple[str, int, float, float, str]:
    """A dock with ``size`` ready learnwares in the index file; returns (space, dim, build s,
    in-process FAISS p50 ms, a user key)."""
    from sqlalchemy import insert, update

    from app.auth.service import create_key
    from app.db.base import utcnow
    from app.db.migrate import upgrade
    from app.db.models import Learnware, LearnwareStatus, Role, SpecSpaceRecord
    from app.db.session import Database
    from app.index.registry import index_epoch
    from app.ml.identify import SpecIndex
    from app.settings import Settings
    from app.spec_spaces.service import register_spaces

    settings = Settings(data_dir=data_dir)
    settings.ensure_dirs()
    upgrade(settings.resolved_database_url)
    db = Database(settings.resolved_database_url)
    started = time.perf_counter()
    try:
        with db.session() as session:
            record = register_spaces(session, settings)[0]
            space_id, dim, epoch = record.id, record.dim, index_epoch(record)
            user = create_key(session, role=Role.user, name="bench").token
        now = utcnow()
        rows: list[dict[str, object]] = [
            {
                "owner_id": None,
                "status": LearnwareStatus.ready,
                "name": f"synthetic-{i}",
                "description": "synthetic spec for the service benchmark",
                "tags": ["synthetic"],
                "task_type": "text-classification",
                "label_names": ["a", "b"],
                "model_format": "onnx",
                "manifest": {},
                "package_sha256": "0" * 64,
                "package_size": 0,
                "space_id": space_id,
                "validation_log": [],
                "index_seq": 1,
                "ready_at": now,
                "created_at": now,
                "updated_at": now,
            }
            for i in range(1, size + 1)
        ]
        with db.session() as session:
            for start in range(0, size, CHUNK):
                session.execute(insert(Learnware), rows[start : start + CHUNK])
            session.execute(
                update(SpecSpaceRecord).where(SpecSpaceRecord.id == space_id).values(index_version=1)
            )
    finally:
        db.dispose()
    rng = np.random.default_rng(seed)
    path = settings.resolved_index_dir / space_id / f"{epoch}-v1.faiss"
    chunks = (
        rng.standard_normal((min(CHUNK, size - s), dim), dtype=np.float32) for s in range(0, size, CHUNK)
    )
    write_index_file(path, dim, np.arange(1, size + 1, dtype=np.int64), chunks)
    build_s = time.perf_counter() - started
    index = SpecIndex.load(path, space_id, dim)
    queries = rng.standard_normal((20, dim), dtype=np.float32)
    timings = []
    for q in queries:
        t0 = time.perf_counter()
        index.search(q, 10)
        timings.append(1000 * (time.perf_counter() - t0))
    del index
    gc.collect()
    return space_id, dim, build_s, statistics.median(timings), user


def _index_prefix(dim: int, n: int) -> bytes:
    """FAISS's serialisation of IndexIDMap2(IndexFlatIP) up to its vectors: two index headers
    (d, ntotal, two unused fields, is_trained, metric) and the count of floats that follow."""
    header = struct.pack("<iqqq?i", dim, n, 1 << 20, 1 << 20, True, faiss.METRIC_INNER_PRODUCT)
    return b"IxM2" + header + b"IxFI" + header + struct.pack("<Q", n * dim)


def write_index_file(path: Path, dim: int, ids: np.ndarray, chunks: Iterator[np.ndarray]) -> None:
    """Write the file ``SpecIndex.save`` would write for these vectors (L2-normalised here) while
    holding one chunk at a time: adding 100,000 specs to an in-memory index first would need
    twice the index's size while its buffer grows. The layout is checked against FAISS's own
    serialisation of a small index before anything is written."""
    _check_layout(dim)
    path.parent.mkdir(parents=True, exist_ok=True)
    written = 0
    with path.open("wb") as out:
        out.write(_index_prefix(dim, len(ids)))
        for chunk in chunks:
            norms = np.linalg.norm(chunk, axis=1, keepdims=True)
            out.write(np.ascontiguousarray(chunk / norms, dtype="<f4").tobytes())
            written += chunk.shape[0]
        out.write(struct.pack("<Q", len(ids)))
        out.write(np.ascontiguousarray(ids, dtype="<i8").tobytes())
    if written != len(ids):
        raise ValueError(f"{written} vectors written for {len(ids)} ids")


def _check_layout(dim: int) -> None:
    from app.ml.identify import SpecIndex

    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((2, dim), dtype=np.float32)
    ids = np.array([7, 9], dtype=np.int64)
    with tempfile.TemporaryDirectory() as tmp:
        reference = SpecIndex("layout-check", dim)
        reference.add(ids, vectors)
        reference.save(Path(tmp) / "reference.faiss")
        written = Path(tmp) / "written.faiss"
        with written.open("wb") as out:
            out.write(_index_prefix(dim, 2))
            out.write((vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype("<f4").tobytes())
            out.write(struct.pack("<Q", 2) + ids.astype("<i8").tobytes())
        if (Path(tmp) / "reference.faiss").read_bytes() != written.read_bytes():
            raise RuntimeError("this FAISS version serialises IndexIDMap2(IndexFlatIP) differently")


def _serve(data_dir: Path, port: int, log: Path) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "PAVEDOCK_DATA_DIR": str(data_dir),
        "PAVEDOCK_DATABASE_URL": "",
        "PAVEDOCK_BROKER_URL": "",
    }
    with log.open("wb") as out:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "uvicorn",
                "app.main:create_app",
                "--factory",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--log-level",
                "warning",
            ],
            env=env,
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            preexec_fn=_first_to_go,
        )


def _wait_ready(url: str, proc: subprocess.Popen[bytes], log: Path, timeout: float = 1800.0) -> float:
    started = time.perf_counter()
    while time.perf_counter() - started < timeout:
        if proc.poll() is not None:
            raise RuntimeError(f"the API exited:\n{log.read_text()[-3000:]}")
        try:
            if httpx.get(f"{url}/readyz", timeout=30).status_code == 200:
                return time.perf_counter() - started
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"the API was not ready after {timeout:.0f} s")


def _load(
    url: str, key: str, bodies: list[bytes], clients: int, requests: int
) -> tuple[list[float], int, float]:
    latencies: list[float] = []
    errors = 0
    lock = threading.Lock()
    counter = iter(range(requests))

    def worker() -> None:
        nonlocal errors
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=600) as http:
            while True:
                with lock:
                    i = next(counter, None)
                if i is None:
                    return
                body = bodies[i % len(bodies)]
                t0 = time.perf_counter()
                try:
                    response = http.post(
                        "/v1/identify",
                        files={"spec": ("spec.safetensors", io.BytesIO(body))},
                        data={"k": "10"},
                    )
                    ok = response.status_code == 200 and len(response.json()["matches"]) == 10
                except httpx.HTTPError:
                    ok = False
                elapsed = 1000 * (time.perf_counter() - t0)
                with lock:
                    if ok:
                        latencies.append(elapsed)
                    else:
                        errors += 1

    threads = [threading.Thread(target=worker) for _ in range(clients)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return latencies, errors, time.perf_counter() - started


def run_service_benchmark(
    *, sizes: list[int], clients: list[int], requests: int, out: Path, console: Console, seed: int = 0
) -> list[SizeResult]:
    import socket

    results: list[SizeResult] = []
    out.parent.mkdir(parents=True, exist_ok=True)
    _first_to_go()
    os.environ["PAVEDOCK_SPEC_SPACES"] = json.dumps(FLOAT_SPACES)  # read by Settings here and by the API
    for size in sizes:
        with tempfile.TemporaryDirectory(prefix=f"bench-service-{size}-") as tmp:
            data_dir = Path(tmp) / "var"
            dim = _default_dim()
            index_bytes = size * dim * 4
            if _mem_available() < index_bytes * 1.05 + (3 << 29):
                raise RuntimeError(
                    f"{size:,} specs of {dim} floats need {index_bytes / 2**30:.1f} GiB (built here, then held by "
                    f"the API process); only {_mem_available() / 2**30:.1f} GiB is available"
                )
            console.print(f"[bold]{size:,} specs[/bold]: filling a fresh dock with synthetic specs …")
            space_id, dim, build_s, faiss_ms, key = _prepare(data_dir, size, seed)
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", 0))
                port = int(sock.getsockname()[1])
            url = f"http://127.0.0.1:{port}"
            log = Path(tmp) / "api.log"
            proc = _serve(data_dir, port, log)
            try:
                load_s = _wait_ready(url, proc, log)
                console.print(f"  index built in {build_s:.1f} s; the API loaded it in {load_s:.1f} s")
                rng = np.random.default_rng(seed + 1)
                bodies = [
                    _spec_bytes(space_id, rng.standard_normal(dim).astype(np.float32)) for _ in range(32)
                ]
                _load(url, key, bodies, 1, 3)  # warm up
                result = SizeResult(
                    size, dim, index_bytes, round(build_s, 2), round(load_s, 2), round(faiss_ms, 2)
                )
                for n_clients in clients:
                    n_requests = requests if size <= 10_000 else max(3 * n_clients, requests // 5)
                    latencies, errors, wall = _load(url, key, bodies, n_clients, n_requests)
                    point = Point(
                        size=size,
                        clients=n_clients,
                        requests=n_requests,
                        errors=errors,
                        p50_ms=round(percentile(latencies, 50), 1),
                        p90_ms=round(percentile(latencies, 90), 1),
                        p99_ms=round(percentile(latencies, 99), 1),
                        mean_ms=round(statistics.fmean(latencies), 1) if latencies else float("nan"),
                        requests_per_s=round(len(latencies) / wall, 2),
                    )
                    result.points.append(point)
                    console.print(
                        f"  {n_clients:>3} clients: p50 {point.p50_ms} ms, p99 {point.p99_ms} ms, "
                        f"{point.requests_per_s} req/s ({n_requests} requests, {errors} errors)"
                    )
                results.append(result)
            finally:
                proc.terminate()
                proc.wait(timeout=120)
    report = {
        "benchmark": "identification through the API (POST /v1/identify, k=10)",
        "specs": "synthetic random vectors of the default spec space's dimension",
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
        },
        "load_average_at_end": os.getloadavg(),
        "results": [asdict(r) for r in results],
    }
    out.write_text(json.dumps(report, indent=2))
    out.with_suffix(".md").write_text(markdown_table(results))
    console.print(f"wrote {out} and {out.with_suffix('.md')}")
    return results


def markdown_table(results: list[SizeResult]) -> str:
    lines = [
        "| indexed specs | index size | clients | requests | p50 ms | p90 ms | p99 ms | requests/s | FAISS alone p50 ms |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for result in results:
        for p in result.points:
            lines.append(
                f"| {result.size:,} | {result.index_bytes / 2**30:.2f} GiB | {p.clients} | {p.requests} | "
                f"{p.p50_ms} | {p.p90_ms} | {p.p99_ms} | {p.requests_per_s} | {result.faiss_search_p50_ms} |"
            )
    return "\n".join(lines) + "\n"
