"""``pavedock package``: a learnware package from what a developer already has, checked as the
dock will check it. The work is in ``app.ml.packaging``; this module reads flags and speaks."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from app.cli.progress import progress_bar
from app.cli.where import pavedock_command

console = Console(soft_wrap=True)
errors = Console(stderr=True, soft_wrap=True)

HELP = """Build a learnware package from your model and check it exactly as the dock will.

SOURCE is one of:

\b
  a transformers folder   config.json + model.safetensors + tokenizer files (save_pretrained);
                          label names from config.json's id2label unless --label-names
  a PEFT LoRA folder      adapter_config.json + adapter_model.safetensors over a registered
                          base (--base, or the adapter's base_model_name_or_path); --label-names
  a scikit-learn file     a fitted text Pipeline saved with joblib (.joblib/.pkl): THIS command
                          unpickles it on your machine to export it to ONNX with skl2onnx, so
                          give it only a file you made yourself; the package holds the ONNX file
                          alone, and the dock never loads a pickle
  an ONNX file            one string tensor in; labels and/or probabilities out
  a linear-map folder     linear.safetensors (one d × d tensor 'weight') after a registered
                          base's pooling, as a UTD transfer saves it; --base and --label-names,
                          or the folder's transfer.json

--inputs (a .jsonl of {"text": ...} or a .txt of one text per line) are the inputs the dock runs
your model on to validate it and fit its spec: a few hundred typical ones, of every class.
A folder's README.md model card (as the Hugging Face tools write it) gives the licence, tags
and description the flags leave out.
The package layout and every manifest field: docs/packages.md.
"""


def register(app: typer.Typer) -> None:
    app.command("package", help=HELP)(package)


def package(
    source: Annotated[Path, typer.Argument(help="model folder, .onnx, or scikit-learn .joblib/.pkl")],
    inputs: Annotated[
        Path | None, typer.Option("--inputs", help='declared inputs: .jsonl of {"text": ...} or .txt')
    ] = None,
    license: Annotated[
        str | None,
        typer.Option(
            "--license",
            help="SPDX licence id, e.g. Apache-2.0, MIT, CC-BY-4.0 (default: the model card's license:)",
        ),
    ] = None,
    label_names: Annotated[
        str | None,
        typer.Option(
            "--label-names", help="comma-separated class names in output order (default: the model's)"
        ),
    ] = None,
    name: Annotated[
        str | None, typer.Option("--name", help="learnware name (default: SOURCE's name)")
    ] = None,
    description: Annotated[
        str,
        typer.Option(
            "--description",
            help="what it does, on what data (default: the card's Model description, or the ONNX doc_string)",
        ),
    ] = "",
    tags: Annotated[
        str | None, typer.Option("--tags", help="comma-separated tags (default: the model card's tags:)")
    ] = None,
    base: Annotated[
        str | None,
        typer.Option(
            "--base", help="registered base (LoRA, pooled-linear; a fine-tune's base for hf-seqcls)"
        ),
    ] = None,
    fmt: Annotated[
        str | None,
        typer.Option(
            "--format", help="hf-seqcls, peft-lora, sklearn, onnx or pooled-linear (default: from SOURCE)"
        ),
    ] = None,
    out: Annotated[
        Path | None, typer.Option("--out", help="package zip to write (default: NAME.zip)")
    ] = None,
    spec: Annotated[
        Path | None,
        typer.Option("--spec", help="also fit the spec here: writes SPEC.safetensors and SPEC.json"),
    ] = None,
) -> None:
    from app.ml.packaging import SOURCE_FORMATS, PackageRequest, PackagingError, make_package, parse_list

    if fmt is not None and fmt not in SOURCE_FORMATS:
        _fail(f"--format {fmt!r} is not a format", f"use one of: {', '.join(SOURCE_FORMATS)}")
    stem = name or source.stem
    request = PackageRequest(
        source=source,
        out=out or Path(f"{stem}.zip"),
        inputs=inputs,
        license=license,
        format=fmt,  # type: ignore[arg-type]  # checked against SOURCE_FORMATS above
        name=name,
        label_names=parse_list(label_names),
        description=description,
        tags=parse_list(tags) or [],
        base=base,
    )
    try:
        with progress_bar("running the model on its inputs", unit="input") as report:
            result = make_package(request, progress=report)
    except PackagingError as exc:
        _fail(exc.problem, exc.fix)
        return
    m = result.manifest
    size = result.path.stat().st_size
    console.print(
        f"[green]packaged[/green] {m.name}: {m.model_format}, labels {', '.join(m.label_names)}, "
        f"{result.n_inputs} declared inputs → {result.path} ({size / 1024:.0f} KiB)"
    )
    for note in result.notes:
        console.print(f"  {note}")
    console.print(
        f"  checked as the dock checks it: safe layout, manifest, the model runs on its inputs "
        f"({result.run.spread})"
    )
    submit = [pavedock_command(), "submit", str(result.path)]
    if spec is not None:
        tensors = _fit_spec(result.path, spec)
        console.print(f"  spec fitted here: {tensors}")
        submit += ["--spec", str(spec)]
    console.print(
        "next, with a developer key in PAVEDOCK_API_KEY (and PAVEDOCK_URL if the dock is elsewhere):"
    )
    console.print("  " + shlex.join(submit), soft_wrap=True, highlight=False)


def _fit_spec(package_zip: Path, stem: Path) -> Path:
    from app.ml.errors import DockError
    from app.ml.learnware_spec import spec_for_package
    from app.ml.spec_space import load_space

    try:
        space = load_space()
        with progress_bar("fitting the spec") as report:
            result = spec_for_package(space, package_zip, progress=report)
    except DockError as exc:
        _fail(f"the spec could not be fitted: {exc}", "submit without --spec: the dock fits it")
    tensors, _ = result.save(stem)
    return tensors


def _fail(problem: str, fix: str) -> None:
    errors.print(f"[red]error:[/red] {problem}", highlight=False)
    if fix:
        errors.print(f"[yellow]fix:[/yellow] {fix}", highlight=False)
    raise typer.Exit(2)
