"""The full-fine-tune profile of the merging benchmark: its trainer, its rescaled merges, and the
smoke profile end to end on a tiny BERT and the real datasets."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from app.bench.merging import variants
from app.bench.merging_full import (
    BLOCK_MATRICES,
    FULL_PACT,
    PROFILES,
    run_full_merge_benchmark,
    scaled_updates,
    unit_merge,
)
from app.ml.encoders import load_encoder
from app.ml.errors import InvalidInput
from app.ml.full_finetune import fit_full
from app.ml.merging import METHODS
from app.ml.merging.registry import get_method, merge_delta
from tests.fixtures.tiny_bases import make_tiny_bert

pytestmark = pytest.mark.usefixtures("single_thread")

WORDS = ["good", "great", "bad", "awful", "the", "movie", "what", "who", "where", "is", "a", "was"]


def test_fit_full_moves_every_weight(tmp_path: Path) -> None:
    base = make_tiny_bert(tmp_path / "tiny", WORDS)
    encoder = load_encoder(base, fresh=True)
    before = {name: p.detach().clone() for name, p in encoder.model.named_parameters()}
    texts = ["good movie", "great movie", "bad movie", "awful movie"] * 2
    losses = fit_full(
        encoder, texts, [1, 1, 0, 0] * 2, ["negative", "positive"], steps=3, lr=1e-3, batch_size=4
    )
    assert len(losses) == 3
    after = dict(encoder.model.named_parameters())
    unmoved = [name for name, weight in before.items() if torch.equal(weight, after[name])]
    # Every weight the mean-pooled features depend on moves, embeddings and norms included; only
    # BERT's pooler, which mean pooling never reads, gets no gradient.
    assert unmoved == ["pooler.dense.weight", "pooler.dense.bias"]
    assert not any(p.requires_grad for p in after.values()), "the model is left frozen for evaluation"
    with pytest.raises(InvalidInput, match="labels must be one id"):
        fit_full(encoder, texts, [2] * 8, ["negative", "positive"], steps=1)


@pytest.mark.parametrize("key", [key for key, _, _ in variants()])
def test_a_merge_at_scale_one_rescales_to_the_merge_at_any_scale(key: str) -> None:
    method, pact = key.removeprefix("pact+"), key.startswith("pact+")
    generator = torch.Generator().manual_seed(0)
    base = {
        "encoder.layer.0.attention.self.query.weight": torch.randn(12, 10, generator=generator),
        "embeddings.word_embeddings.weight": torch.randn(20, 10, generator=generator),
        "encoder.layer.0.output.LayerNorm.bias": torch.randn(10, generator=generator),
    }
    members = [
        {name: 0.1 * torch.randn(w.shape, generator=generator) for name, w in base.items()} for _ in range(3)
    ]
    fixed = dict(PROFILES["full"].fixed.get(method, {}))
    if pact:
        fixed.update(pact=True, **FULL_PACT)
    unit = unit_merge(base, members, method, fixed)
    spec = get_method(method)
    scale_name = "lam" if "lam" in {p.name for p in spec.params} else "alpha"
    for scale in (0.4, 1.7):
        resolved = spec.resolve({**fixed, scale_name: scale})
        rescaled = scaled_updates(unit, scale)
        for name, weight in base.items():
            direct = merge_delta(name, weight, [m[name] for m in members], spec, resolved)
            torch.testing.assert_close(rescaled[name], direct, rtol=1e-5, atol=1e-6)


def test_pact_filters_the_blocks_matrices_not_the_embeddings() -> None:
    import re

    assert re.search(BLOCK_MATRICES, "encoder.layer.5.intermediate.dense.weight")
    assert not re.search(BLOCK_MATRICES, "embeddings.word_embeddings.weight")


def test_unknown_full_profile_is_refused(tmp_path: Path) -> None:
    with pytest.raises(
        InvalidInput, match="unknown full-fine-tune merge profile 'quick'; known: smoke, full"
    ):
        run_full_merge_benchmark("quick", tmp_path / "out.json", tmp_path)


def test_smoke_profile_on_a_tiny_bert_reports_every_variant(datasets_dir: Path, tmp_path: Path) -> None:
    base = make_tiny_bert(tmp_path / "tiny", WORDS, hidden=16, layers=2)
    out, cache = tmp_path / "merge-full.json", tmp_path / "cache"
    result = run_full_merge_benchmark("smoke", out, datasets_dir, lambda *_: None, cache, base=base)
    saved = json.loads(out.read_text())
    assert saved["normalized_accuracy"] == result["normalized_accuracy"]
    keys = {key for key, _, _ in variants()}
    assert saved["learnwares"] == "full fine-tunes" and saved["profile"] == "full-ft-smoke"
    for field in (
        "normalized_accuracy",
        "absolute_accuracy",
        "normalized_accuracy_per_group",
        "chosen_hyperparameters",
        "merge_seconds",
    ):
        assert set(saved[field]) == keys, field
        assert all(set(by_size) == {"2"} for by_size in saved[field].values()), field
    assert set(saved["pact_mean_gain"]) == set(METHODS)
    for method in METHODS:
        gain = saved["normalized_accuracy"][f"pact+{method}"]["2"] - saved["normalized_accuracy"][method]["2"]
        assert saved["pact_mean_gain"][method] == pytest.approx(gain)
    assert set(saved["zero_shot_normalized_accuracy"]) == {"2"}
    assert len(saved["runs"]) == len(keys)
    for run in saved["runs"]:
        assert set(run["chosen"].values()) <= {0.5, 1.0}, "λ/α comes from the profile's dev grid"
        assert all(0.0 <= acc <= 1.0 for acc in run["test_accuracy"].values())
    for name in ("sst2", "trec"):
        facts = saved["tasks"][name]
        assert 0.0 <= facts["own_test"] <= 1.0 and facts["task_vector_norm"] > 0.0
    assert saved["settings"]["pact"] == FULL_PACT
    markdown = out.with_suffix(".md").read_text()
    assert markdown.count("| `pact+") == len(METHODS)
    assert "| zero-shot base |" in markdown and "| sst2 |" in markdown
    assert len(list((cache / "full-fine-tunes").iterdir())) == 2

    again = run_full_merge_benchmark("smoke", out, datasets_dir, lambda *_: None, cache, base=base)
    assert again["normalized_accuracy"] == result["normalized_accuracy"], (
        "fine-tunes and runs come from the cache"
    )
    assert again["tasks"] == result["tasks"]


def test_cli_names_the_learnwares_option_when_its_value_is_unknown(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from app.cli.main import app

    result = CliRunner().invoke(
        app, ["bench", "merge", "--learnwares", "qlora", "--out", str(tmp_path / "out.json")]
    )
    assert result.exit_code == 2
    assert "--learnwares" in result.output and "'qlora' is not one of 'lora'" in result.output
    assert not (tmp_path / "out.json").exists()


def test_pact_sweep_on_full_fine_tunes_reads_the_benchmarks_runs(datasets_dir: Path, tmp_path: Path) -> None:
    from app.bench.merging_full import FULL_PACT_SETTINGS, run_full_pact_sweep
    from app.bench.pact_sweep import SWEEP_METHODS

    base = make_tiny_bert(tmp_path / "tiny", WORDS, hidden=16, layers=2)
    cache = tmp_path / "cache"
    bench = run_full_merge_benchmark(
        "smoke", tmp_path / "merge.json", datasets_dir, lambda *_: None, cache, base=base
    )
    runs_before = set((cache / "runs-full").iterdir())
    out = tmp_path / "sweep.json"
    sweep = run_full_pact_sweep("smoke", out, datasets_dir, lambda *_: None, cache, base=base)
    normalized = bench["normalized_accuracy"]
    assert isinstance(normalized, dict)
    default = next(iter(FULL_PACT_SETTINGS))
    for method in SWEEP_METHODS:
        assert sweep["without_pact"][method] == normalized[method]  # type: ignore[index]
        assert sweep["normalized_accuracy"][default][method] == normalized[f"pact+{method}"]  # type: ignore[index]
    added = set((cache / "runs-full").iterdir()) - runs_before
    assert len(added) == (len(FULL_PACT_SETTINGS) - 1) * len(SWEEP_METHODS), "only the new settings ran"
    assert set(json.loads(out.read_text())["mean_gain"]) == set(FULL_PACT_SETTINGS)
    assert out.with_suffix(".md").read_text().count("| `pact+iso_c` |") == len(FULL_PACT_SETTINGS)
