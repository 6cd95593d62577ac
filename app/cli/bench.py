"""``pavedock bench``: the benchmarks on the real datasets (JSON + Markdown + plot), the
service and market-scale benchmarks through the API, and the pgvector engine's on its own.

Heavy imports happen inside the commands so ``pavedock --help`` is quick.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from app.cli.common import DEFAULT_URL, Url, cache_dir, console, datasets_dir
from app.cli.progress import progress_bar

bench_app = typer.Typer(
    no_args_is_help=True, help="Benchmarks on the real datasets (JSON + Markdown + plot)."
)

Profile = Annotated[
    str,
    typer.Option(
        "--profile",
        help="quick (minutes) or full (all tasks); identify also takes cover (label sets that "
        "contain one another, many-class subsets)",
    ),
]
Out = Annotated[Path, typer.Option("--out", help="JSON file to write; .md and .png are written beside it")]
Datasets = Annotated[
    Path | None, typer.Option("--datasets", help="datasets folder (default: settings / ../shared/datasets)")
]
Cache = Annotated[Path | None, typer.Option("--cache", help="cache of trained learnwares and specs")]


class Learnwares(StrEnum):
    """What the merging benchmarks merge."""

    lora = "lora"
    full = "full"


MergeLearnwares = Annotated[
    Learnwares,
    typer.Option(
        help="lora (rank-8 adapters; profiles smoke, quick, full) or full (full fine-tunes, every "
        "weight trained; profiles smoke, full)"
    ),
]
# A merging benchmark's runner: (profile, out, datasets, progress, cache_dir=...) -> its result.
MergeRunner = Callable[..., dict[str, object]]


def _run_merging(
    title: str,
    runners: dict[Learnwares, MergeRunner],
    learnwares: Learnwares,
    profile: str,
    out: Path,
    datasets: Path | None,
    cache: Path | None,
) -> dict[str, object]:
    """``merge`` and ``pact-sweep``: the runner for the learnwares' kind, with a progress bar and
    the merging benchmarks' one cache (trained learnwares and runs are shared between them)."""
    with progress_bar(title) as report:
        return runners[learnwares](
            profile, out, datasets_dir(datasets), report, cache_dir=cache_dir(cache, "merge")
        )


def register(app: typer.Typer) -> None:
    app.add_typer(bench_app, name="bench")


@bench_app.command("identify")
def bench_identify(
    out: Out,
    profile: Profile = "quick",
    datasets: Datasets = None,
    cache: Cache = None,
    head: Annotated[
        str | None,
        typer.Option(help="the spec's class vectors: label-names or prototypes (default: the space's)"),
    ] = None,
    extras: Annotated[
        bool, typer.Option("--extras/--no-extras", help="also the steps curve and the beyond comparison")
    ] = True,
    market_seed: Annotated[
        int,
        typer.Option(
            min=0,
            help="another market of the same tasks: families, training and corruption seeds (0: the published one)",
        ),
    ] = 0,
    kind: Annotated[
        list[str] | None,
        typer.Option(
            help="only this kind of user task (repeat for more; default: all, which the headline "
            "mean over kinds needs)"
        ),
    ] = None,
    task: Annotated[
        list[str] | None,
        typer.Option(
            help="only the users of this task (repeat for more; the market is the same: a partial "
            "run, for rankings to replay)"
        ),
    ] = None,
    wide_check: Annotated[
        int,
        typer.Option(
            min=0,
            help="also rank every user with this many candidates checked, named or not (0: off)",
        ),
    ] = 0,
    rankings: Annotated[
        Path | None,
        typer.Option(
            help="also write each user's whole ranking here (JSON lines), for `bench identify-replay`"
        ),
    ] = None,
) -> None:
    """The identification benchmark of BENCHMARK.md (kinds of user task as the service ranks; PAVE,
    PAVE♣, RKME; beyond; cost; steps curve)."""
    from app.bench.identification import run_identification_benchmark

    result = run_identification_benchmark(
        profile,
        out,
        datasets_dir(datasets),
        cache_dir(cache, "identify"),
        head=head,
        extras=extras,
        market_seed=market_seed,
        only_kinds=tuple(kind or ()),
        only_tasks=tuple(task or ()),
        wide_check=wide_check,
        rankings_out=rankings,
    )
    typer.echo(json.dumps(result["summary"], indent=2))


@bench_app.command("identify-replay")
def bench_identify_replay(
    rankings: Annotated[list[Path], typer.Argument(help="`bench identify --rankings` files")],
    rule: Annotated[
        list[str] | None,
        typer.Option(
            help="a rule to replay (repeat for more; `service` is the recorded order; "
            "weighed:FEATURE=WEIGHT,... orders the first checked matches by a weighed sum)"
        ),
    ] = None,
    fit: Annotated[
        list[str] | None,
        typer.Option(
            help="instead, fit how much these features are worth in units of shot score (repeat; "
            "the first should be 'shot score'; `rankings.fitted_weights`)"
        ),
    ] = None,
    task: Annotated[
        list[str] | None,
        typer.Option(
            help="only the users of this task (repeat for more): markets compared on the same tasks"
        ),
    ] = None,
    kind: Annotated[
        list[str] | None,
        typer.Option(help="only the users of this kind of task (repeat for more), e.g. all but 'spec only'"),
    ] = None,
    skip_kind: Annotated[
        list[str] | None,
        typer.Option(help="leave out the users of this kind (repeat), e.g. 'spec only': users with examples"),
    ] = None,
    wide: Annotated[
        bool,
        typer.Option(
            help="replay the rankings a `--wide-check` run kept (every user with that many checked) "
            "instead of the service's"
        ),
    ] = False,
    rerun: Annotated[
        list[Path] | None,
        typer.Option(
            help="records of a partial rerun of the same market on newer code (`bench identify --kind "
            "… --task … --rankings`): each in place of the same user's (repeat for more)"
        ),
    ] = None,
    flattery: Annotated[
        bool,
        typer.Option(
            help="instead, how much better each kind of learnware answered the users' examples than "
            "its test split (own task or another, family, variant; `rankings.flattery_table`)"
        ),
    ] = False,
) -> None:
    """Each kind's figures with every user's recorded matches reordered by other rules: what a
    rule that reorders the checked matches would have given, in seconds (trains and runs nothing;
    `app.bench.rankings`)."""
    from app.bench.rankings import (
        fitted_weights,
        flattery_table,
        read_records,
        replay_table,
        rule_named,
        wide_view,
    )

    try:
        records = read_records(rankings, rerun or ())
    except ValueError as error:
        raise typer.BadParameter(str(error)) from None
    if wide:
        records = [view for r in records if (view := wide_view(r)) is not None]
        if not records:
            raise typer.BadParameter(
                "these records keep no wide ranking (run `bench identify --wide-check K`)"
            )
    if task:
        records = [r for r in records if r["task"] in task]
        if not records:
            raise typer.BadParameter(f"no user of the tasks {task} in these records")
    if kind or skip_kind:
        records = [
            r for r in records if (not kind or r["kind"] in kind) and r["kind"] not in (skip_kind or ())
        ]
        if not records:
            raise typer.BadParameter("no user of those kinds in these records")
    if flattery:
        typer.echo(flattery_table(records))
        return
    if fit:
        try:
            fitted = fitted_weights(records, fit)
        except (KeyError, ValueError) as error:
            raise typer.BadParameter(str(error.args[0])) from None
        typer.echo(json.dumps(fitted, indent=2, ensure_ascii=False))
        return
    names = rule or ["service", "agreement-added-1"]
    for name in names:
        try:
            rule_named(name)
        except KeyError as error:
            raise typer.BadParameter(str(error.args[0])) from None
    typer.echo(replay_table(records, names))


@bench_app.command("identify-markets")
def bench_identify_markets(
    runs: Annotated[
        list[Path], typer.Argument(help="two or more `bench identify` JSON files, one per market seed")
    ],
    out: Out,
) -> None:
    """Each kind's identification figures over several market seeds: the mean, the spread over
    seeds, each market's value and the kinds short of the targets (trains nothing)."""
    from app.bench.identification_markets import MarketsMismatch, write_combined

    try:
        combined = write_combined(runs, out)
    except MarketsMismatch as error:
        raise typer.BadParameter(str(error)) from error
    typer.echo(json.dumps(combined["verdict"], indent=2))


@bench_app.command("identify-rerun")
def bench_identify_rerun(
    run: Annotated[Path, typer.Argument(help="a `bench identify` JSON file")],
    rerun: Annotated[
        Path, typer.Argument(help="a `bench identify --kind ...` JSON file of the same market, newer code")
    ],
    out: Out,
) -> None:
    """The run with the rerun's kinds of user task in place of its own (for a change that moves
    those kinds' users only); the per-kind table is recomputed and both commands kept (trains nothing)."""
    from app.bench.identification_rerun import RerunMismatch, write_with_rerun

    try:
        merged = write_with_rerun(run, rerun, out)
    except RerunMismatch as error:
        raise typer.BadParameter(str(error)) from error
    typer.echo(json.dumps(merged["kinds"]["mean over kinds"], indent=2))


@bench_app.command("label-maps")
def bench_label_maps(
    out: Out,
    datasets: Datasets = None,
    margin: Annotated[list[float] | None, typer.Option(help="also count at these margins")] = None,
) -> None:
    """How often the names' meaning picks the right label map, and what the margin lets through
    (renamed label sets of the shared datasets; trains nothing)."""
    from app.bench.label_maps import run_label_map_benchmark

    result = run_label_map_benchmark(out, datasets_dir(datasets), tuple(margin or ()))
    typer.echo(json.dumps(result["at_margin"], indent=2))


@bench_app.command("spec-time")
def bench_spec_time(
    out: Out,
    datasets: Datasets = None,
    shots: Annotated[int, typer.Option(help="examples per user task")] = 32,
    repeats: Annotated[int, typer.Option(help="fits per task and recipe")] = 3,
    steps: Annotated[
        list[int] | None, typer.Option(help="only the recipes of these step counts (0: the default)")
    ] = None,
) -> None:
    """Seconds a user waits for a task spec: the default recipe against multi-step ones, beside
    this CPU's matrix-multiply rate and the floor it puts under the default recipe."""
    from app.bench.spec_time import RECIPES, run_spec_time_benchmark

    recipes = [r for r in RECIPES if steps is None or r[1] in steps]
    if not recipes:
        raise typer.BadParameter(f"no recipe of {steps} steps; there are {[r[1] for r in RECIPES]}")
    result = run_spec_time_benchmark(
        out, datasets_dir(datasets), shots=shots, repeats=repeats, recipes=recipes
    )
    typer.echo(json.dumps({"gemm_gflops": result["gemm_gflops"], **result["recipes"]}, indent=2))


@bench_app.command("merge")
def bench_merge(
    out: Out,
    profile: Profile = "quick",
    datasets: Datasets = None,
    cache: Cache = None,
    learnwares: MergeLearnwares = Learnwares.lora,
) -> None:
    """The merging benchmark: every method with and without PACT on 2-, 4- and 8-task groups."""
    from app.bench.merging import run_merge_benchmark
    from app.bench.merging_full import run_full_merge_benchmark

    runners = {Learnwares.lora: run_merge_benchmark, Learnwares.full: run_full_merge_benchmark}
    result = _run_merging("merge benchmark", runners, learnwares, profile, out, datasets, cache)
    typer.echo(json.dumps(result.get("normalized_accuracy", {}), indent=2))


@bench_app.command("pact-sweep")
def bench_pact_sweep(
    out: Out,
    profile: Profile = "quick",
    datasets: Datasets = None,
    cache: Cache = None,
    learnwares: MergeLearnwares = Learnwares.lora,
) -> None:
    """Iso-C and TSV-M under several PACT settings (layers, K, side) on the merging benchmark's groups."""
    from app.bench.merging_full import run_full_pact_sweep
    from app.bench.pact_sweep import run_pact_sweep

    runners = {Learnwares.lora: run_pact_sweep, Learnwares.full: run_full_pact_sweep}
    result = _run_merging("PACT sweep", runners, learnwares, profile, out, datasets, cache)
    typer.echo(json.dumps(result["mean_gain"], indent=2))


@bench_app.command("transfer")
def bench_transfer(
    out: Out,
    profile: Profile = "quick",
    datasets: Datasets = None,
    cache: Cache = None,
    source: Annotated[
        str | None, typer.Option("--source", help="source base (default all-MiniLM-L6-v2)")
    ] = None,
    target: Annotated[
        str | None, typer.Option("--target", help="target base (default all-mpnet-base-v2)")
    ] = None,
    tasks: Annotated[
        str | None,
        typer.Option(
            "--tasks", help="comma-separated tasks instead of the profile's (finished ones are cached)"
        ),
    ] = None,
) -> None:
    """The transfer benchmark: MiniLM → MPNet (or --source all-mpnet-base-v2 --target
    all-MiniLM-L6-v2) with BiCo, THESEUS-style, naive and UTD."""
    from app.bench.transfer import run_transfer_benchmark

    with progress_bar("transfer benchmark") as report:
        result = run_transfer_benchmark(
            profile,
            out,
            datasets_dir(datasets),
            report,
            cache_dir=cache_dir(cache, "transfer"),
            tasks=[t.strip() for t in tasks.split(",") if t.strip()] if tasks else None,
            source_base=source,
            target_base=target,
        )
    typer.echo(json.dumps(result.get("gain_over_zero_shot", {}), indent=2))


@bench_app.command("service")
def bench_service(
    sizes: Annotated[str, typer.Option(help="comma-separated index sizes")] = "1000,100000",
    clients: Annotated[str, typer.Option(help="comma-separated concurrent client counts")] = "1,4,16",
    requests: Annotated[int, typer.Option(help="requests per (size, clients) point")] = 200,
    out: Annotated[Path, typer.Option(help="JSON results; a Markdown table is written beside it")] = Path(
        "bench-out/service.json"
    ),
) -> None:
    """Identification through the API (uvicorn + HTTP) at several index sizes and client counts."""
    from app.bench.service import run_service_benchmark

    run_service_benchmark(
        sizes=[int(s) for s in sizes.split(",")],
        clients=[int(c) for c in clients.split(",")],
        requests=requests,
        out=out,
        console=console,
    )


@bench_app.command("tasks")
def bench_tasks(
    out: Out,
    url: Url = DEFAULT_URL,
    key: Annotated[str, typer.Option(help="a user key", envvar="PAVEDOCK_API_KEY")] = "",
    tasks: Annotated[str, typer.Option(help="comma-separated datasets to draw tasks from")] = ",".join(
        ("ag_news", "sst2", "trec", "sms_spam", "tweet_emotion")
    ),
    seeds: Annotated[int, typer.Option(min=1, help="draws of 8 shots per class per dataset")] = 2,
    spec_only: Annotated[
        bool,
        typer.Option(
            "--spec-only/--no-spec-only",
            help="also post each as a spec fitted here (the dock runs the agreement check)",
        ),
    ] = False,
    datasets: Datasets = None,
) -> None:
    """Few-shot tasks through a running dock's API, timed from the POST to the ranking."""
    from app.bench.task_latency import run_task_latency

    if not key:
        raise typer.BadParameter("a user key is needed (--key or PAVEDOCK_API_KEY)", param_hint="--key")
    result = run_task_latency(
        url,
        key,
        datasets_dir(datasets),
        out,
        tasks=tuple(t for t in tasks.split(",") if t),
        seeds=seeds,
        spec_only=spec_only,
    )
    for kind, v in result["by_kind"].items():
        console.print(f"{kind}: median {v['median_s']:.2f} s, p90 {v['p90_s']:.2f} s over {v['tasks']} tasks")


@bench_app.command("scale")
def bench_scale(
    sizes: Annotated[str, typer.Option(help="comma-separated market sizes")] = "100000,1000000",
    clients: Annotated[str, typer.Option(help="comma-separated concurrent client counts")] = "1,4,16",
    requests: Annotated[int, typer.Option(help="requests per (size, clients) point")] = 300,
    ingest: Annotated[int, typer.Option(help="learnwares written while serving (0: skip)")] = 500,
    datasets: Datasets = None,
    cache: Cache = None,
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
        datasets_dir=datasets_dir(datasets),
        cache_dir=cache_dir(cache, "scale"),
        out=out,
        work_dir=work_dir,
        api_workers=api_workers,
        say=lambda line: typer.echo(line),
    )


class EngineIndex(StrEnum):
    """pgvector's index on the specs (``PAVEDOCK_VECTOR_ENGINE_INDEX``)."""

    hnsw = "hnsw"
    ivfflat = "ivfflat"
    exact = "exact"


@bench_app.command("engine")
def bench_engine(
    url: Annotated[str, typer.Option(help="a PostgreSQL + pgvector (0.7 or newer) server")],
    out: Annotated[Path, typer.Option(help="JSON results")],
    size: Annotated[int, typer.Option(min=1, help="learnwares in the simulated market")] = 100_000,
    index: Annotated[EngineIndex, typer.Option(help="the engine's index on the specs")] = EngineIndex.hnsw,
    ef: Annotated[str, typer.Option(help="comma-separated hnsw.ef_search values (ivfflat: probes ×10)")] = (
        "100,400,1000"
    ),
    datasets: Datasets = None,
    cache: Cache = None,
) -> None:
    """The pgvector engine on the simulated market: recall@1 and @10 against exact search, latency.

    The market and queries of ``bench scale`` (sharing its cache), straight into an engine table.
    """
    from app.bench.engine_scale import run

    try:
        ef_searches = tuple(int(x) for x in ef.split(",") if x.strip())
    except ValueError:
        raise typer.BadParameter(
            f"{ef!r} is not a comma-separated list of numbers", param_hint="--ef"
        ) from None
    result = run(
        url,
        size,
        datasets_dir(datasets),
        cache_dir(cache, "scale"),
        index=index.value,
        ef_searches=ef_searches,
        say=lambda line: typer.echo(line),
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
