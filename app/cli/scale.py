"""``pavedock bench scale``: identification at market scale (two-stage index, HTTP)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from app.cli.ml import default_cache_dir, default_datasets_dir


def bench_scale(
    sizes: Annotated[str, typer.Option(help="comma-separated market sizes")] = "100000,1000000",
    clients: Annotated[str, typer.Option(help="comma-separated concurrent client counts")] = "1,4,16",
    requests: Annotated[int, typer.Option(help="requests per (size, clients) point")] = 300,
    ingest: Annotated[int, typer.Option(help="learnwares written while serving (0: skip)")] = 500,
    datasets: Annotated[Path | None, typer.Option(help="datasets folder")] = None,
    cache: Annotated[Path | None, typer.Option(help="cache folder for the real task specs")] = None,
    work_dir: Annotated[
        Path | None, typer.Option(help="where the temporary dock lives (needs ~2.2x the codes)")
    ] = None,
    api_workers: Annotated[int, typer.Option(help="uvicorn worker processes of the API")] = 1,
    out: Annotated[Path, typer.Option(help="JSON results")] = Path("bench-out/scale.json"),
) -> None:
    """Recall against exact search, HTTP latency, memory, disk, build and ingest at market scale."""
    from app.bench.scale import run_scale_benchmark

    run_scale_benchmark(
        sizes=[int(s) for s in sizes.split(",")],
        clients=[int(c) for c in clients.split(",")],
        requests=requests,
        ingest=ingest,
        datasets_dir=default_datasets_dir(datasets),
        cache_dir=default_cache_dir(cache, "scale"),
        out=out,
        work_dir=work_dir,
        api_workers=api_workers,
        say=lambda line: typer.echo(line),
    )


def register(app: typer.Typer) -> None:
    """Add ``bench scale`` to the ``bench`` group."""
    for group in app.registered_groups:
        if group.name == "bench" and group.typer_instance is not None:
            group.typer_instance.command("scale")(bench_scale)
            return
    raise RuntimeError("the bench group must be registered before bench scale")
