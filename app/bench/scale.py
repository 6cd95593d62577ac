"""Identification at market scale: ``pavedock bench scale``.

For each size a fresh dock (SQLite, local store) gets that many ready learnwares whose specs
come from ``market_sim`` (families grown from real task specs, never i.i.d. noise), indexed
by the two-stage ``BinarySpecIndex`` in the file layout the API loads. Measured:

- the market's realism check (cosine distributions beside the real specs');
- recall@1 and @10 of the two-stage search against exact search, on real held-out task specs,
  in process, for several cells-per-query settings, and through HTTP for the served one;
- ``POST /v1/identify`` latency (p50/p90/p99) and requests/s through a real uvicorn process
  with 1, 4 and 16 clients (packed specs uploaded: 4.6 KB each);
- RSS and PSS of the API process (its index is a memory map: PSS splits shared pages between
  the processes that map them), disk, build time, and the ingest rate while serving (new
  learnwares written to the database the way the pipeline does, absorbed by the API's sync).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import httpx
import numpy as np
from safetensors.numpy import save

from app.bench.market_sim import Market, RealSpecs, generate_market, real_specs
from app.bench.report import percentile
from app.bench.service import ROOT, _first_to_go, _mem_available, _wait_ready
from app.ml.binary_index import BinaryIndexParams, BinarySpecIndex, cosine_from_hamming, hamming

CHUNK = 5000
PROBES = (4, 8, 16, 32)


@dataclass
class Point:
    clients: int
    requests: int
    errors: int
    p50_ms: float
    p90_ms: float
    p99_ms: float
    requests_per_s: float


@dataclass
class SizeResult:
    size: int
    market_s: float
    build_s: float
    nlist: int
    nprobe: int
    codes_bytes: int
    disk_bytes: int
    exact_ms: float
    recall: dict[str, dict[str, float]]
    """nprobe → recall@1, recall@10, mean ms in process, mean gap of the 10th score to exact."""
    http_recall_at_10: float
    api_load_s: float
    api_rss_bytes: int
    api_pss_bytes: int
    ingest: dict[str, float]
    points: list[Point] = field(default_factory=list)


def _memory(pid: int) -> tuple[int, int]:
    """(RSS, PSS) of a process in bytes, from /proc (PSS counts a shared page 1/n per mapper)."""
    values = {}
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            parts = line.split()
            if parts and parts[0] in ("Rss:", "Pss:"):
                values[parts[0]] = int(parts[1]) * 1024
    return values.get("Rss:", 0), values.get("Pss:", 0)


def _serve(data_dir: Path, port: int, log: Path, workers: int) -> subprocess.Popen[bytes]:
    """A real uvicorn of the dock's API (``workers`` processes share the memory-mapped codes)."""
    env = {
        **os.environ,
        "PAVEDOCK_DATA_DIR": str(data_dir),
        "PAVEDOCK_DATABASE_URL": "",
        "PAVEDOCK_BROKER_URL": "",
    }
    command = [sys.executable, "-m", "uvicorn", "app.main:create_app", "--factory", "--host", "127.0.0.1"]
    command += ["--port", str(port), "--log-level", "warning", "--workers", str(workers)]
    with log.open("wb") as out:
        return subprocess.Popen(
            command, env=env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, preexec_fn=_first_to_go
        )


def _processes(root: int) -> list[int]:
    """``root`` and its descendants (uvicorn's worker processes)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def realism_check(
    real: RealSpecs, market_codes: np.ndarray, market: Market, seed: int = 0
) -> dict[str, object]:
    """Cosine distributions of the simulated market beside the real specs'."""
    dim = real.dim
    rng = np.random.default_rng(seed)
    tasks = np.asarray(real.tasks)

    def stats(values: list[float]) -> dict[str, float]:
        arr = np.asarray(values)
        return {
            "n": len(arr),
            "mean": round(float(arr.mean()), 4),
            "p1": round(float(np.percentile(arr, 1)), 4),
            "p99": round(float(np.percentile(arr, 99)), 4),
        }

    def cos(a: np.ndarray, b: np.ndarray) -> float:
        return float(cosine_from_hamming(hamming(a, b), dim))

    same: list[float] = []
    unrelated: list[float] = []
    for i in range(len(real.bits)):
        for j in range(i + 1, len(real.bits)):
            (same if tasks[i] == tasks[j] else unrelated).append(cos(real.bits[i], real.bits[j]))
    models = np.flatnonzero(market.kind == 0)
    by_parent: dict[int, np.ndarray] = {
        int(p): models[market.parent[models] == p] for p in np.unique(market.parent[models])
    }
    sim: dict[str, list[float]] = {
        "same draw": [],
        "same task, other draw": [],
        "unrelated": [],
        "near-duplicate": [],
    }
    for _ in range(2000):
        a = int(rng.choice(models))
        pa = int(market.parent[a])
        b = int(rng.choice(by_parent[pa]))
        if b != a:
            sim["same draw"].append(cos(market_codes[a], market_codes[b]))
        others = [p for p in by_parent if tasks[p] == tasks[pa] and p != pa]
        if others:
            sim["same task, other draw"].append(
                cos(market_codes[a], market_codes[int(rng.choice(by_parent[int(rng.choice(others))]))])
            )
        unrel = [p for p in by_parent if tasks[p] != tasks[pa]]
        sim["unrelated"].append(
            cos(market_codes[a], market_codes[int(rng.choice(by_parent[int(rng.choice(unrel))]))])
        )
    dups = np.flatnonzero(market.kind == 1)
    for d in rng.choice(dups, min(2000, len(dups)), replace=False):
        sim["near-duplicate"].append(cos(market_codes[d], market_codes[market.source[d]]))
    return {
        "real": {"same task (two draws)": stats(same), "unrelated tasks": stats(unrelated)},
        "simulated": {name: stats(values) for name, values in sim.items() if values},
        "kinds": {
            "model": int((market.kind == 0).sum()),
            "near-duplicate": int((market.kind == 1).sum()),
            "mixture": int((market.kind == 2).sum()),
        },
    }


def _prepare_dock(data_dir: Path, size: int) -> tuple[str, str, str]:
    """A dock with ``size`` ready learnwares (ids 1..size) and no index file yet; returns
    (space id, index file path, user key)."""
    from sqlalchemy import insert, update

    from app.auth.service import create_key
    from app.db.base import utcnow
    from app.db.migrate import upgrade
    from app.db.models import Learnware, LearnwareStatus, Role, SpecSpaceRecord
    from app.db.session import Database
    from app.index.registry import index_epoch
    from app.settings import Settings
    from app.spec_spaces.service import register_spaces

    settings = Settings(data_dir=data_dir)
    settings.ensure_dirs()
    upgrade(settings.resolved_database_url)
    db = Database(settings.resolved_database_url)
    try:
        with db.session() as session:
            record = register_spaces(session, settings)[0]
            space_id, epoch = record.id, index_epoch(record)
            user = create_key(session, role=Role.user, name="bench").token
        now = utcnow()
        with db.session() as session:
            for start in range(1, size + 1, CHUNK):
                rows: list[dict[str, object]] = [
                    {
                        "owner_id": None,
                        "status": LearnwareStatus.ready,
                        "name": f"market-{i}",
                        "description": "simulated learnware of the scale benchmark",
                        "tags": ["simulated"],
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
                    for i in range(start, min(size, start + CHUNK - 1) + 1)
                ]
                session.execute(insert(Learnware), rows)
            session.execute(
                update(SpecSpaceRecord).where(SpecSpaceRecord.id == space_id).values(index_version=1)
            )
    finally:
        db.dispose()
    path = settings.resolved_index_dir / space_id / f"{epoch}-v1.bits"
    return space_id, str(path), user


def _ingest(data_dir: Path, space_id: str, codes: np.ndarray, first_id: int) -> float:
    """Write ready learnwares with packed specs the way the spec stage does (one transaction per
    learnware, version bumped); returns the seconds it took."""
    from app.db.models import Learnware, LearnwareStatus, SpecKind, SpecSource
    from app.db.session import Database
    from app.index.registry import bump_index_version
    from app.learnwares.service import spec_row
    from app.ml.binary_index import SIGN_BITS, unpack_signs
    from app.settings import Settings

    settings = Settings(data_dir=data_dir)
    db = Database(settings.resolved_database_url)
    started = time.perf_counter()
    try:
        for i, code in enumerate(codes):
            with db.session() as session:
                spec = spec_row(
                    space_id,
                    unpack_signs(code, len(code) * 8),
                    kind=SpecKind.model,
                    source=SpecSource.computed,
                    meta={},
                    encoding=SIGN_BITS,
                )
                session.add(spec)
                session.flush()
                learnware = Learnware(
                    owner_id=None,
                    status=LearnwareStatus.ready,
                    name=f"ingested-{first_id + i}",
                    task_type="text-classification",
                    label_names=["a", "b"],
                    model_format="onnx",
                    package_sha256="0" * 64,
                    package_size=0,
                    space_id=space_id,
                    spec_id=spec.id,
                )
                session.add(learnware)
                session.flush()
                learnware.index_seq = bump_index_version(session, space_id)
    finally:
        db.dispose()
    return time.perf_counter() - started


def _ingest_while_serving(
    url: str, key: str, bodies: list[bytes], data_dir: Path, space_id: str, fresh: np.ndarray, first_id: int
) -> dict[str, float]:
    """Write ``fresh`` learnwares while one client keeps querying; time until the last one is
    the top match of its own spec in every API process (each syncs before it searches, so a
    few answers in a row, from whichever process, must all have it)."""
    stop = threading.Event()
    served: list[float] = []
    last = _bodies(space_id, fresh[-1:])[0]
    last_id = first_id + len(fresh) - 1

    def query() -> None:
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=120) as http:
            i = 0
            while not stop.is_set():
                t1 = time.perf_counter()
                http.post(
                    "/v1/identify",
                    files={"spec": ("spec.safetensors", io.BytesIO(bodies[i % len(bodies)]))},
                    data={"k": "10"},
                )
                served.append(1000 * (time.perf_counter() - t1))
                i += 1

    def found_everywhere(http: httpx.Client) -> bool:
        for _ in range(6):
            response = http.post("/v1/identify", files={"spec": ("s", io.BytesIO(last))}, data={"k": "1"})
            if response.status_code != 200 or response.json()["matches"][0]["learnware_id"] != last_id:
                return False
        return True

    reader = threading.Thread(target=query)
    reader.start()
    t0 = time.perf_counter()
    try:
        write_s = _ingest(data_dir, space_id, fresh, first_id)
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=120) as http:
            while not found_everywhere(http) and time.perf_counter() - t0 < 600:
                time.sleep(0.1)
        seen_s = time.perf_counter() - t0
    finally:
        stop.set()
        reader.join()
    return {
        "learnwares": len(fresh),
        "written_per_s": round(len(fresh) / write_s, 1),
        "searchable_within_s": round(seen_s, 2),
        "searchable_per_s": round(len(fresh) / seen_s, 1),
        "queries_meanwhile": len(served),
        "query_p50_ms_meanwhile": round(percentile(served, 50), 1),
        "query_p99_ms_meanwhile": round(percentile(served, 99), 1),
    }


def _bodies(space_id: str, queries: np.ndarray) -> list[bytes]:
    return [save({"pave": np.ascontiguousarray(q)}, metadata={"space_id": space_id}) for q in queries]


def _load(
    url: str, key: str, bodies: list[bytes], clients: int, requests: int
) -> tuple[list[float], int, float, dict[int, list[int]]]:
    latencies: list[float] = []
    errors = 0
    answers: dict[int, list[int]] = {}
    lock = threading.Lock()
    counter = iter(range(requests))

    def worker() -> None:
        nonlocal errors
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=120) as http:
            while True:
                with lock:
                    i = next(counter, None)
                if i is None:
                    return
                t0 = time.perf_counter()
                try:
                    response = http.post(
                        "/v1/identify",
                        files={"spec": ("spec.safetensors", io.BytesIO(bodies[i % len(bodies)]))},
                        data={"k": "10"},
                    )
                    ok = response.status_code == 200 and len(response.json()["matches"]) == 10
                except httpx.HTTPError:
                    ok = False
                elapsed = 1000 * (time.perf_counter() - t0)
                with lock:
                    if ok:
                        latencies.append(elapsed)
                        answers.setdefault(
                            i % len(bodies), [m["learnware_id"] for m in response.json()["matches"]]
                        )
                    else:
                        errors += 1

    threads = [threading.Thread(target=worker) for _ in range(clients)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return latencies, errors, time.perf_counter() - started, answers


def run_scale_benchmark(
    *,
    sizes: list[int],
    clients: list[int],
    requests: int,
    ingest: int,
    datasets_dir: Path,
    cache_dir: Path,
    out: Path,
    work_dir: Path | None = None,
    api_workers: int = 1,
    say: Callable[[str], None] = print,
    seed: int = 0,
) -> dict[str, object]:
    import socket

    out.parent.mkdir(parents=True, exist_ok=True)
    _first_to_go()
    say("real task specs (fitted once, then cached) …")
    real = real_specs(datasets_dir, cache_dir, say=say)
    queries = real.bits[real.rows(market=False)]
    results: list[SizeResult] = []
    checks: dict[str, object] = {}
    params = BinaryIndexParams()
    for size in sizes:
        need = 2 * size * real.bits.shape[1]
        if _mem_available() < need * 0.6:
            raise RuntimeError(
                f"{size:,} specs need about {need / 2**30:.1f} GiB of page cache; {_mem_available() / 2**30:.1f} GiB free"
            )
        with tempfile.TemporaryDirectory(prefix=f"bench-scale-{size}-", dir=work_dir) as tmp:
            data_dir = Path(tmp) / "var"
            say(f"[{size:,}] growing the market from {len(real.rows(market=True))} real task specs …")
            t0 = time.perf_counter()
            market_path = Path(tmp) / "market.npy"
            codes = np.lib.format.open_memmap(
                market_path, mode="w+", dtype=np.uint8, shape=(size, real.bits.shape[1])
            )
            market = generate_market(real, size, codes, seed=seed, say=say)
            codes.flush()
            market_s = time.perf_counter() - t0
            check = realism_check(real, codes, market, seed)
            checks[str(size)] = check
            say(f"  realism check: {json.dumps(check)}")
            space_id, index_path, key = _prepare_dock(data_dir, size)
            say("  building the two-stage index …")
            t0 = time.perf_counter()
            ids = np.arange(1, size + 1, dtype=np.int64)
            index = BinarySpecIndex.build(
                space_id, real.dim, ids, codes, Path(index_path).parent / "build.codes.npy", params
            )
            index.save(Path(index_path))
            build_s = time.perf_counter() - t0
            del codes
            market_path.unlink()
            index = BinarySpecIndex.load(Path(index_path), space_id, real.dim)
            say(f"  built in {build_s:.1f} s: {index.nlist} cells; exact ground truth …")
            t0 = time.perf_counter()
            exact_matches = [index.search(q, 10, exact=True) for q in queries]
            exact_ms = 1000 * (time.perf_counter() - t0) / len(queries)
            exact = [[m.id for m in found] for found in exact_matches]
            exact_10th = [found[-1].score for found in exact_matches]
            recall: dict[str, dict[str, float]] = {}
            for nprobe in PROBES:
                t0 = time.perf_counter()
                got = [index.search(q, 10, nprobe=nprobe) for q in queries]
                ms = 1000 * (time.perf_counter() - t0) / len(queries)
                r10 = statistics.fmean(
                    len({m.id for m in g} & set(e)) / 10 for g, e in zip(got, exact, strict=True)
                )
                r1 = statistics.fmean(float(g[0].id == e[0]) for g, e in zip(got, exact, strict=True))
                gap = statistics.fmean(x - g[-1].score for g, x in zip(got, exact_10th, strict=True))
                recall[str(nprobe)] = {
                    "recall_at_1": round(r1, 4),
                    "recall_at_10": round(r10, 4),
                    "ms": round(ms, 2),
                    "gap_10th": round(gap, 5),
                }
                say(f"  nprobe {nprobe}: recall@1 {r1:.3f}, recall@10 {r10:.3f}, {ms:.1f} ms in process")
            # The API serves the fewest cells per query that reach recall@10 0.95 here (the
            # manifest it loads carries the parameters; rewriting it leaves the codes file alone).
            reaching = [p for p in PROBES if recall[str(p)]["recall_at_10"] >= 0.95]
            served_nprobe = reaching[0] if reaching else PROBES[-1]
            index.params = replace(index.params, nprobe=served_nprobe)
            index.save(Path(index_path))
            say(f"  serving with nprobe {served_nprobe}")
            del index
            folder = Path(index_path).parent
            codes_bytes = sum(p.stat().st_size for p in folder.glob("*.codes.npy"))
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", 0))
                port = int(sock.getsockname()[1])
            url = f"http://127.0.0.1:{port}"
            log = Path(tmp) / "api.log"
            proc = _serve(data_dir, port, log, api_workers)
            try:
                load_s = _wait_ready(url, proc, log)
                bodies = _bodies(space_id, queries)
                _, _, _, answers = _load(url, key, bodies, 1, len(bodies))  # warm-up, and the served answers
                http_recall = statistics.fmean(len(set(answers[i]) & set(exact[i])) / 10 for i in answers)
                say(f"  API ready in {load_s:.1f} s; recall@10 through HTTP {http_recall:.3f}")
                points = []
                for n_clients in clients:
                    latencies, errors, wall, _ = _load(url, key, bodies, n_clients, requests)
                    point = Point(
                        n_clients,
                        requests,
                        errors,
                        round(percentile(latencies, 50), 1),
                        round(percentile(latencies, 90), 1),
                        round(percentile(latencies, 99), 1),
                        round(len(latencies) / wall, 1),
                    )
                    points.append(point)
                    say(
                        f"  {n_clients:>3} clients: p50 {point.p50_ms} ms, p99 {point.p99_ms} ms, {point.requests_per_s} req/s, {errors} errors"
                    )
                usage = [_memory(pid) for pid in _processes(proc.pid)]
                rss, pss = sum(u[0] for u in usage), sum(u[1] for u in usage)
                say(f"  API processes: {len(usage)}, RSS {rss / 2**30:.2f} GiB, PSS {pss / 2**30:.2f} GiB")
                ingest_result: dict[str, float] = {}
                if ingest:
                    rng = np.random.default_rng(seed + 7)
                    fresh = real.bits[real.rows(market=True)][rng.integers(0, 75, ingest)] ^ np.packbits(
                        rng.random((ingest, real.dim)) < 0.3, axis=-1
                    )
                    ingest_result = _ingest_while_serving(
                        url, key, bodies, data_dir, space_id, fresh, size + 1
                    )
                    say(f"  ingest while serving: {ingest_result}")
            finally:
                proc.terminate()
                proc.wait(timeout=120)
            disk = sum(p.stat().st_size for p in data_dir.rglob("*") if p.is_file())
            results.append(
                SizeResult(
                    size=size,
                    market_s=round(market_s, 1),
                    build_s=round(build_s, 1),
                    nlist=int(params.nlist(size)),
                    nprobe=served_nprobe,
                    codes_bytes=codes_bytes,
                    disk_bytes=disk,
                    exact_ms=round(exact_ms, 1),
                    recall=recall,
                    http_recall_at_10=round(http_recall, 4),
                    api_load_s=round(load_s, 1),
                    api_rss_bytes=rss,
                    api_pss_bytes=pss,
                    ingest=ingest_result,
                    points=points,
                )
            )
    report: dict[str, object] = {
        "benchmark": "identification at market scale (POST /v1/identify, k=10, packed sign specs)",
        "queries": f"{len(queries)} real task specs (held-out few-shot draws of {len(set(real.tasks))} tasks)",
        "index": asdict(params),
        "api_workers": api_workers,
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
        },
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "load_average_at_end": os.getloadavg(),
        "realism": checks,
        "results": [asdict(r) for r in results],
    }
    out.write_text(json.dumps(report, indent=2))
    say(f"wrote {out}")
    return report
