"""The pgvector engine on the simulated market: recall@1 and @10 against exact search, latency.

The specs are ``market_sim``'s (families grown from the real task specs of the shared tasks), the
queries the real held-out task specs, as in ``pavedock bench scale``; they are loaded straight
into an engine table (the dock's database is not involved) and searched with the engine's own
query (``PgVectorEngine.search_table``), one client, in process. Exact search is FAISS's flat
Hamming scan of the same packed specs.

    pavedock bench engine --url postgresql://postgres@127.0.0.1:55432/postgres \\
        --size 100000 --out bench-out/engine-100k.json
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import faiss
import numpy as np

from app.bench.market_sim import generate_market, real_specs
from app.index.pgvector import EngineSpace, PgVectorEngine
from app.ml.binary_index import SIGN_BITS

_BATCH = 500


def run(
    url: str,
    size: int,
    datasets_dir: Path,
    cache_dir: Path,
    *,
    index: str = "hnsw",
    ef_searches: tuple[int, ...] = (100, 400, 1000),
    seed: int = 0,
    say: Callable[[str], None] = print,
) -> dict[str, Any]:
    say("real task specs (fitted once, then cached) …")
    real = real_specs(datasets_dir, cache_dir, say=say)
    queries = real.bits[real.rows(market=False)]
    say(f"[{size:,}] growing the market …")
    codes = np.empty((size, real.bits.shape[1]), dtype=np.uint8)
    generate_market(real, size, codes, seed=seed, say=say)
    ids = np.arange(1, size + 1, dtype=np.int64)

    say("  exact ground truth (FAISS flat Hamming) …")
    flat = faiss.IndexBinaryFlat(real.dim)
    flat.add(codes)
    _, exact_rows = flat.search(np.ascontiguousarray(queries), 10)
    exact = [[int(r) + 1 for r in row] for row in exact_rows]
    del flat

    space = EngineSpace(f"bench-engine-{size}", real.dim, SIGN_BITS, "bench", 0)
    loader = PgVectorEngine(None, url, index="exact", timeout_s=600)  # type: ignore[arg-type]
    say("  loading the engine …")
    t0 = time.perf_counter()
    with loader._transaction() as cur:
        cur.execute("SET LOCAL statement_timeout = 0")
        cur.execute(f"DROP TABLE IF EXISTS {space.table}")
        if _has_state(cur):
            cur.execute("DELETE FROM pavedock_spaces WHERE space_id = %s", (space.space_id,))
        loader._ensure(cur, space)

    def batches() -> Iterator[list[tuple[Any, ...]]]:
        for start in range(0, size, _BATCH):
            yield [
                (int(ids[i]), True, True, [], 0, space.literal(codes[i]))
                for i in range(start, min(size, start + _BATCH))
            ]

    with loader._transaction() as cur:
        cur.execute("SET LOCAL statement_timeout = 0")
        loader._write(cur, space, batches())
    load_s = time.perf_counter() - t0
    say(f"  loaded in {load_s:.0f} s; building the {index} index …")
    searcher = PgVectorEngine(None, url, index=index, timeout_s=600)  # type: ignore[arg-type]
    t0 = time.perf_counter()
    with searcher._transaction() as cur:
        cur.execute("SET LOCAL statement_timeout = 0")
        cur.execute("SET LOCAL maintenance_work_mem = '2GB'")
        searcher._create_spec_index(cur, space)
        cur.execute(f"SELECT pg_total_relation_size('{space.table}'), pg_relation_size('{space.table}_spec')")
        table_bytes, index_bytes = (int(x) for x in cur.fetchone())
    build_s = time.perf_counter() - t0
    say(
        f"  index built in {build_s:.0f} s (table {table_bytes / 2**30:.2f} GiB, index {index_bytes / 2**20:.0f} MiB)"
    )

    runs = []
    for ef in ef_searches if index != "exact" else (0,):
        searcher.ef_search = max(ef, 10)
        latencies: list[float] = []
        got: list[list[int]] = []
        for q in queries:
            literal = space.literal(q)
            t0 = time.perf_counter()
            found = searcher.search_table(space, literal, 10, [("ready AND public", ())])
            latencies.append(1000 * (time.perf_counter() - t0))
            got.append([m.id for m in found])
        for q in queries:  # a second pass: latency with warm caches
            t0 = time.perf_counter()
            searcher.search_table(space, space.literal(q), 10, [("ready AND public", ())])
            latencies.append(1000 * (time.perf_counter() - t0))
        recall10 = statistics.fmean(len(set(g) & set(e)) / 10 for g, e in zip(got, exact, strict=True))
        recall1 = statistics.fmean(float(bool(g) and g[0] == e[0]) for g, e in zip(got, exact, strict=True))
        latencies.sort()
        row = {
            "ef_search": ef if index != "exact" else None,
            "recall_at_1": round(recall1, 3),
            "recall_at_10": round(recall10, 3),
            "p50_ms": round(latencies[len(latencies) // 2], 1),
            "p99_ms": round(latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))], 1),
        }
        say(f"  {json.dumps(row)}")
        runs.append(row)
    loader.close()
    searcher.close()
    return {
        "size": size,
        "index": index,
        "queries": len(queries),
        "load_s": round(load_s, 1),
        "build_s": round(build_s, 1),
        "table_gib": round(table_bytes / 2**30, 3),
        "index_mib": round(index_bytes / 2**20, 1),
        "runs": runs,
    }


def _has_state(cur: Any) -> bool:
    cur.execute("SELECT to_regclass('pavedock_spaces') IS NOT NULL")
    return bool(cur.fetchone()[0])
