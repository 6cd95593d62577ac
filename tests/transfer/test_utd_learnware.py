"""A UTD transfer's result as a learnware: the operator folded into a ``pooled-linear`` map is
exactly the operator, and the package it is written in is checked, loaded and run as the dock
does (tiny bases, built in the test)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import save_file

from app.ml.bases import register_base
from app.ml.encoders import embed_texts, load_encoder
from app.ml.errors import InvalidPackage, UnsafePackage
from app.ml.fingerprint import weights_fingerprint
from app.ml.head import LabelNameHead
from app.ml.packages import Manifest, build_package, extract_package, inputs_jsonl
from app.ml.pooled_linear import apply_linear, check_linear_file, fold_operator, read_linear
from app.ml.reuse import package_model
from app.ml.runners import PooledLinearRunner, load_runner
from app.ml.runners.peft_lora import HEAD_TEMPERATURE
from app.ml.transfer import TransferResult, transfer_learnware
from app.ml.transfer.utd import UTDOperator, combine_operators
from app.ml.validation import run_on_inputs
from tests.fixtures.tiny_bases import LABEL_NAMES, TinyBases

TARGET = "tiny-mpnet-utd-tests"


@pytest.fixture(scope="module")
def target(tiny: TinyBases) -> str:
    """The tiny MPNet as a registered base, as a package names its base."""
    register_base(TARGET, lambda: tiny.mpnet)
    return TARGET


@pytest.fixture(scope="module")
def utd(tiny: TinyBases, target: str) -> TransferResult:
    return transfer_learnware("utd", tiny.adapter, tiny.bert, target, tiny.texts, None, LABEL_NAMES)


def _package(result: TransferResult, tmp_path: Path, texts: list[str], base: str = TARGET) -> Path:
    folder = result.save(tmp_path / "utd")
    return package_model(
        folder,
        tmp_path / "utd.zip",
        model_format="pooled-linear",
        name="sentiment, moved with UTD",
        description="a tiny UTD transfer",
        label_names=LABEL_NAMES,
        base=base,
        inputs=texts,
        license="MIT",
    )


def test_the_folded_map_is_the_operator() -> None:
    gen = torch.Generator().manual_seed(3)
    op = UTDOperator(torch.randn(24, 24, generator=gen), alpha=0.7)
    emb = torch.randn(10, 24, generator=gen, dtype=torch.float64)
    weight = fold_operator(op)
    assert weight.dtype == torch.float32 and weight.shape == (24, 24)
    # The operator maps the unit embedding; the map the raw one: the same direction, so the
    # same cosine against any class embedding.
    mapped = F.normalize(apply_linear(weight.double(), emb), dim=-1)
    torch.testing.assert_close(mapped, F.normalize(op.apply(emb), dim=-1), atol=1e-6, rtol=1e-6)
    # Operators that add fold into the sum of their maps minus the identities.
    other = UTDOperator(torch.randn(24, 24, generator=gen), alpha=-0.3)
    both = fold_operator(combine_operators([op, other]))
    torch.testing.assert_close(both, weight + fold_operator(other) - torch.eye(24), atol=1e-6, rtol=1e-6)


def test_a_utd_result_is_saved_with_its_folded_map(utd: TransferResult, tmp_path: Path) -> None:
    assert utd.kind == "operator" and utd.operator is not None
    folder = utd.save(tmp_path / "utd")
    assert check_linear_file(folder / "linear.safetensors") == 48
    torch.testing.assert_close(read_linear(folder / "linear.safetensors", 48), fold_operator(utd.operator))


def test_the_packaged_learnware_runs_as_the_operator_on_the_target(
    utd: TransferResult, tiny: TinyBases, tmp_path: Path
) -> None:
    assert utd.operator is not None
    zip_path = _package(utd, tmp_path, tiny.texts)
    package = extract_package(zip_path, tmp_path / "extracted")
    assert package.manifest.model_format == "pooled-linear" and package.manifest.base_model == TARGET
    assert sorted(p.name for p in (package.root / "linear").iterdir()) == ["linear.safetensors"]
    runner = load_runner(package)
    assert isinstance(runner, PooledLinearRunner) and runner.label_names == LABEL_NAMES

    # What the runner computes is the operator applied to the target's own embeddings, read by
    # the target's label-name head: the UTD deployment, to float tolerance.
    encoder = load_encoder(tiny.mpnet)
    head = LabelNameHead.from_names(encoder, LABEL_NAMES, HEAD_TEMPERATURE)
    expected = torch.softmax(head.logits(utd.operator.apply(embed_texts(encoder, tiny.texts))), dim=-1)
    got = runner.predict(tiny.texts)
    assert got.probs is not None
    np.testing.assert_allclose(got.probs, expected.numpy(), atol=1e-5, rtol=1e-4)
    np.testing.assert_array_equal(got.labels, expected.argmax(dim=-1).numpy())
    # The operator changes the answers (it is not the identity in disguise).
    plain = torch.softmax(head.logits(embed_texts(encoder, tiny.texts)), dim=-1).numpy()
    assert np.abs(got.probs - plain).max() > 1e-3

    # The dock's validation of the model's answers on its declared inputs accepts it.
    run = run_on_inputs(runner, LABEL_NAMES, package.inputs)
    assert run.probs is not None and run.labels.shape == (len(tiny.texts),)
    assert weights_fingerprint(package).isalnum()


def _linear_package(tmp_path: Path, tensors: dict[str, torch.Tensor], base: str = TARGET) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(tmp_path / "linear.safetensors"))
    manifest = Manifest.model_validate(
        {
            "name": "a linear map",
            "label_names": LABEL_NAMES,
            "model_format": "pooled-linear",
            "base_model": base,
            "license": "MIT",
            "inputs": "inputs.jsonl",
        }
    )
    files: dict[str, Path | bytes] = {
        "linear/linear.safetensors": tmp_path / "linear.safetensors",
        "inputs.jsonl": inputs_jsonl(["good fun", "bad plot"]),
    }
    return build_package(tmp_path / "p.zip", manifest, files)


@pytest.mark.parametrize(
    ("tensors", "match"),
    [
        ({"weight": torch.eye(48), "bias": torch.zeros(48)}, "exactly one tensor, 'weight'"),
        ({"matrix": torch.eye(48)}, "exactly one tensor, 'weight'"),
        ({"weight": torch.ones(48, 32)}, r"shape \[48, 32\], not a square"),
        ({"weight": torch.ones(48)}, r"shape \[48\], not a square"),
        ({"weight": torch.eye(48, dtype=torch.int64)}, "dtype I64, not a float type"),
    ],
)
def test_a_bad_linear_map_is_refused_when_the_package_is_checked(
    tmp_path: Path, target: str, tensors: dict[str, torch.Tensor], match: str
) -> None:
    zip_path = _linear_package(tmp_path, tensors)
    with pytest.raises(InvalidPackage, match=match):
        extract_package(zip_path, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_the_runner_refuses_a_map_of_another_width_or_non_finite_values(tmp_path: Path, target: str) -> None:
    narrow = extract_package(_linear_package(tmp_path / "a", {"weight": torch.eye(32)}), tmp_path / "a" / "x")
    with pytest.raises(InvalidPackage, match=r"32 × 32, the base's embeddings have width 48"):
        load_runner(narrow)
    weight = torch.eye(48)
    weight[3, 4] = float("nan")
    broken = extract_package(_linear_package(tmp_path / "b", {"weight": weight}), tmp_path / "b" / "x")
    with pytest.raises(InvalidPackage, match="NaN or infinite"):
        load_runner(broken)


def test_the_runner_never_reads_a_linear_map_linked_out_of_the_package(tmp_path: Path, target: str) -> None:
    """A folder assembled by hand (not extracted) whose map is a link to a host file: refused."""
    package = extract_package(
        _linear_package(tmp_path / "a", {"weight": torch.eye(48)}), tmp_path / "a" / "x"
    )
    host = tmp_path / "host-linear.safetensors"
    save_file({"weight": torch.eye(48) * 2}, str(host))
    weights = package.root / "linear" / "linear.safetensors"
    weights.unlink()
    weights.symlink_to(host)
    with pytest.raises(UnsafePackage, match="symbolic link"):
        load_runner(package)
    weights.unlink()  # and absent: the runner opens the one name, it never searches for another
    with pytest.raises(InvalidPackage, match=r"linear\.safetensors'.*not in the package"):
        load_runner(package)


def test_a_linear_map_needs_a_registered_base(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="base_model is required for a pooled-linear linear map"):
        Manifest.model_validate(
            {"name": "x", "label_names": LABEL_NAMES, "model_format": "pooled-linear", "license": "MIT"}
        )
    zip_path = _linear_package(tmp_path, {"weight": torch.eye(48)}, base="no-such-base")
    with pytest.raises(InvalidPackage, match="'no-such-base' is not a registered base"):
        extract_package(zip_path, tmp_path / "out")


def test_a_linear_map_is_fingerprinted_with_its_base(tmp_path: Path, tiny: TinyBases, target: str) -> None:
    register_base("tiny-mpnet-utd-twin", lambda: tiny.mpnet)
    weight = {"weight": torch.eye(48) + 0.01}
    first = extract_package(_linear_package(tmp_path / "a", weight), tmp_path / "a" / "x")
    renamed = extract_package(_linear_package(tmp_path / "b", weight), tmp_path / "b" / "x")
    other = extract_package(
        _linear_package(tmp_path / "c", weight, base="tiny-mpnet-utd-twin"), tmp_path / "c" / "x"
    )
    assert weights_fingerprint(first) == weights_fingerprint(renamed)
    assert weights_fingerprint(first) != weights_fingerprint(other)


def test_the_learnware_pages_snippet_runs_on_the_downloaded_package(
    utd: TransferResult, tiny: TinyBases, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from app.db.models import Learnware
    from app.web.card import usage

    learnware = Learnware(id=7, model_format="pooled-linear", base_model=TARGET)
    snippets = {key: code for key, _, code in usage(learnware, "http://dock")}
    package = extract_package(_package(utd, tmp_path, tiny.texts), tmp_path / "learnware-7")
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {}
    exec(snippets["pooled-linear"], namespace)  # the page's code, as a user pastes it
    expected = PooledLinearRunner(package).features(["an example text"])
    torch.testing.assert_close(namespace["embeddings"], expected)


def test_pavedock_package_builds_one_from_a_saved_utd_result(
    utd: TransferResult, tiny: TinyBases, tmp_path: Path
) -> None:
    from app.ml.packaging import PackageRequest, PackagingError, detect_format, make_package

    folder = utd.save(tmp_path / "utd")
    inputs = tmp_path / "inputs.txt"
    inputs.write_text("\n".join(tiny.texts) + "\n")
    assert detect_format(folder) == "pooled-linear"
    request = PackageRequest(source=folder, out=tmp_path / "utd.zip", inputs=inputs, license="MIT")
    result = make_package(request)
    assert result.manifest.model_format == "pooled-linear" and result.manifest.base_model == TARGET
    assert result.manifest.label_names == LABEL_NAMES  # from transfer.json, as the base
    assert any("transfer.json" in note for note in result.notes) and len(result.run.labels) == len(tiny.texts)

    # Without transfer.json the map names neither its base nor its classes: the fix says so.
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "linear.safetensors").write_bytes((folder / "linear.safetensors").read_bytes())
    with pytest.raises(PackagingError, match="which base's embeddings") as info:
        make_package(PackageRequest(source=bare, out=tmp_path / "b.zip", inputs=inputs, license="MIT"))
    assert "--base" in info.value.fix
    with pytest.raises(PackagingError, match="does not name its classes"):
        make_package(
            PackageRequest(source=bare, out=tmp_path / "b.zip", inputs=inputs, license="MIT", base=TARGET)
        )
    narrow = tmp_path / "narrow"
    narrow.mkdir()
    save_file({"weight": torch.eye(32)}, str(narrow / "linear.safetensors"))
    with pytest.raises(PackagingError, match="width 48") as info:
        make_package(
            PackageRequest(
                source=narrow,
                out=tmp_path / "n.zip",
                inputs=inputs,
                license="MIT",
                base=TARGET,
                label_names=LABEL_NAMES,
            )
        )
    assert "'weight', d × d" in info.value.fix and not (tmp_path / "n.zip").exists()
