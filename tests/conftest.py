"""Shared fixtures: real datasets and real packages, and a redis-server of a test's own
(``tests/fixtures/redis_server.py``), here; the service's (a migrated database, a runtime, the
app, keys) in ``tests/fixtures/service.py``; tiny bases in ``tests/fixtures/tiny_bases.py``.

Only fixtures live here (nothing autouse), so the ML tests are not affected; and one hook that
hands the settings' torch threads to the ML core.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.fixtures.redis_server import RedisServer

pytest_plugins = ["tests.fixtures.service", "tests.fixtures.tiny_bases"]

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def pytest_configure(config: pytest.Config) -> None:
    """Torch threads as the settings say (``PAVEDOCK_TORCH_THREADS=1`` on a shared host): the ML
    tests load models without a runtime or the CLI, which hand them over elsewhere."""
    from app.ml.threads import use_torch_threads
    from app.settings import Settings

    use_torch_threads(Settings().torch_threads)


@pytest.fixture
def single_thread() -> Iterator[None]:
    """Torch on one thread for a test of tiny matrices: more threads only add fork-join overhead
    and contention on a shared host."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def datasets_dir() -> Path:
    """The shared real datasets (PAVEDOCK_DATASETS_DIR or ../shared/datasets)."""
    for candidate in (
        os.environ.get("PAVEDOCK_DATASETS_DIR"),
        Path(__file__).resolve().parents[2] / "shared" / "datasets",
    ):
        if candidate and Path(candidate).is_dir():
            return Path(candidate)
    pytest.skip("no datasets folder (set PAVEDOCK_DATASETS_DIR)")


@pytest.fixture(scope="session")
def package_dir() -> Path:
    """Where real learnware packages built by the tests are kept between runs (the builders are
    deterministic). The folder is named by a hash of the code that makes packages, so a change
    to it builds them afresh. PAVEDOCK_TEST_PACKAGES overrides the location."""
    root = Path(__file__).resolve().parents[1]
    sources = ("app/bench/builders.py", "app/ml/packages.py", "app/ml/finetune.py", "app/ml/data.py")
    digest = hashlib.sha256(b"".join((root / s).read_bytes() for s in sources)).hexdigest()[:12]
    base = Path(os.environ.get("PAVEDOCK_TEST_PACKAGES", root / ".cache" / "pavedock" / "test-packages"))
    folder = base / digest
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def cached(path: Path, build: Callable[[Path], Path]) -> Path:
    """``path`` if an earlier run built it, else build it (atomically: a partial zip never stays)."""
    if path.is_file():
        return path
    partial = path.with_name(f".{path.stem}.{os.getpid()}.zip")
    build(partial)
    partial.replace(path)
    return path


@pytest.fixture(scope="session")
def tfidf_packages(datasets_dir: Path, package_dir: Path) -> dict[str, Path]:
    """Real TF-IDF + logistic regression ONNX learnwares for three datasets (seconds to train)."""
    from app.bench.builders import train_tfidf_onnx_learnware
    from app.ml.data import load_task

    def build(name: str) -> Callable[[Path], Path]:
        return lambda out: train_tfidf_onnx_learnware(
            load_task(datasets_dir, name, "train", limit=1500, seed=0), out
        )

    return {
        name: cached(package_dir / f"{name}-tfidf.zip", build(name)) for name in ("sst2", "trec", "sms_spam")
    }


@pytest.fixture(scope="session")
def lora_packages(datasets_dir: Path, package_dir: Path) -> dict[str, Path]:
    """Real LoRA learnwares of MiniLM for two datasets, trained briefly (seconds each)."""
    from app.bench.builders import train_lora_learnware
    from app.ml.data import load_task

    def build(name: str) -> Callable[[Path], Path]:
        return lambda out: train_lora_learnware(
            load_task(datasets_dir, name, "train", limit=400, seed=0), out, steps=12, n_inputs=64
        )

    return {name: cached(package_dir / f"{name}-lora.zip", build(name)) for name in ("sst2", "sms_spam")}


@pytest.fixture(scope="session")
def linear_packages(datasets_dir: Path, package_dir: Path) -> dict[str, Path]:
    """Real sequence classifiers of MiniLM (hf-seqcls, naming their base) for two datasets."""
    from app.bench.builders import train_linear_head_learnware
    from app.ml.data import load_task

    def build(name: str) -> Callable[[Path], Path]:
        return lambda out: train_linear_head_learnware(
            load_task(datasets_dir, name, "train", limit=300, seed=0), out, n_inputs=64
        )

    return {name: cached(package_dir / f"{name}-linear.zip", build(name)) for name in ("sst2", "trec")}


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    """A redis-server of this test's own (stop and start it for an outage)."""
    try:
        server = RedisServer(tmp_path / "redis")
    except FileNotFoundError:
        pytest.skip("redis-server is not installed (.ci/run installs it)")
    server.start()
    try:
        yield server
    finally:
        server.stop()
