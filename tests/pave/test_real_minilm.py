"""The claim on real data: with the real MiniLM base, a few-shot task finds its own learnware.

Learnwares are real packages (TF-IDF + logistic regression in ONNX, trained here on the
shared datasets) run through the dock's runner; their specs are fitted to their own
predictions. Skipped only where the shared datasets folder is absent.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from app.ml.data import few_shot, load_task
from app.ml.identify import rank_specs
from app.ml.learnware_spec import spec_for_package
from app.ml.pave import fit_pave_spec
from app.ml.spec_space import load_space

DATASETS = Path(os.environ.get("PAVEDOCK_DATASETS_DIR", Path(__file__).parents[3] / "shared" / "datasets"))

pytestmark = [
    pytest.mark.real_model,
    pytest.mark.skipif(not (DATASETS / "sst2").is_dir(), reason=f"shared datasets not found at {DATASETS}"),
]


@pytest.fixture(scope="module")
def market(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from app.bench.builders import train_tfidf_onnx_learnware

    out = tmp_path_factory.mktemp("market")
    packages = {}
    for name, corrupt in (("sst2", 0.0), ("sst2", 0.8), ("sms_spam", 0.0), ("trec", 0.0)):
        task = load_task(DATASETS, name, "train", limit=3000)
        key = f"{name}-{'corrupted' if corrupt else 'good'}"
        packages[key] = train_tfidf_onnx_learnware(task, out / f"{key}.zip", corrupt=corrupt, n_inputs=128)
    return packages


def test_same_task_learnware_outranks_unrelated_and_corrupted(market: dict[str, Path]) -> None:
    space = load_space()
    specs = {key: spec_for_package(space, path) for key, path in market.items()}
    keys = list(specs)
    for seed in (0, 1):
        shots = few_shot(load_task(DATASETS, "sst2", "train"), per_class=8, seed=seed)
        user = fit_pave_spec(space, shots.texts, shots.labels, shots.label_names, kind="task")
        ranking = [
            keys[m.id] for m in rank_specs(user.vector, {i: specs[k].vector for i, k in enumerate(keys)})
        ]
        assert ranking[0] == "sst2-good", ranking
        assert ranking.index("sst2-good") < ranking.index("sst2-corrupted")
        assert ranking.index("sst2-good") < ranking.index("sms_spam-good")


def test_spec_time_benchmark_times_each_recipe(tmp_path: Path) -> None:
    from app.bench.spec_time import run_spec_time_benchmark

    out = tmp_path / "spec-time.json"
    report = run_spec_time_benchmark(
        out,
        DATASETS,
        tasks=("sst2", "trec"),
        shots=8,
        repeats=1,
        recipes=(("one-grad", 0, True), ("adam-2", 2, True)),
    )
    assert report["shots"] == [8, 6]  # trec: 6 classes, one shot each of the 6 chosen, at most 8
    assert set(report["recipes"]) == {"one-grad", "adam-2"}
    for row in report["recipes"].values():
        assert 0 < row["median_seconds"] <= row["p95_seconds"]
    assert "| one-grad | 0 |" in out.with_suffix(".md").read_text()
    assert report["gemm_gflops"] > 0 and report["base_non_embedding_parameters"] > 1_000_000
    assert set(report["one_gradient_per_task"]) == {"sst2", "trec"}
    for row in report["one_gradient_per_task"].values():
        assert row["tokens"] > 0 and row["floor_seconds"] > 0 and row["share_of_peak"] > 0
        assert row["tokens"] <= row["padded_tokens"] < 2 * row["tokens"]
