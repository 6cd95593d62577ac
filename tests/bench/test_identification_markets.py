"""Combining identification runs of several market seeds: on the two published runs, and the
mismatches it refuses."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from app.bench.identification_markets import HEADLINE, MarketsMismatch, combine, render_markdown
from app.cli.main import app

DOCS = Path(__file__).resolve().parents[2] / "docs" / "benchmarks"
SEED0 = DOCS / "identification-quick.json"
SEED1 = DOCS / "identification-quick-market1.json"
FULL = (
    "identification-full-kinds-heldout.json",
    "identification-full-kinds-market1-heldout.json",
    "identification-full-kinds-market2.json",
)
"""The full profile's runs on market seeds 0, 1 and 2, as the README's table reports them."""


@pytest.fixture(scope="module")
def published() -> list[dict]:
    return [json.loads(SEED0.read_text()), json.loads(SEED1.read_text())]


def test_each_kind_is_the_mean_over_markets_with_their_spread(published: list[dict]) -> None:
    combined = combine(published)
    assert combined["market_seeds"] == [0, 1]
    for kind, row in combined["kinds"].items():
        for measure in ("oracle_agreement_at1", "normalized_accuracy", "quality_filter"):
            values = [run["kinds"][kind][measure] for run in published]
            entry = row[measure]
            if any(math.isnan(v) for v in values):  # e.g. no quality filter without an own learnware
                assert math.isnan(entry["mean"])
                continue
            assert entry["per_market"] == values
            assert entry["mean"] == pytest.approx(sum(values) / 2)
            assert entry["spread"] == pytest.approx(abs(values[0] - values[1]) / 2)
            assert entry["worst"] == min(values)


def test_the_verdict_names_the_kinds_short_of_each_target(published: list[dict]) -> None:
    verdict = combine(published)["verdict"]
    kinds = combine(published)["kinds"]
    for measure, target in (("normalized_accuracy", 0.97), ("quality_filter", 0.97)):
        short = {k for k, row in kinds.items() if k != HEADLINE and row[measure]["mean"] < target}
        assert set(verdict[measure]["kinds_short"]) == short
        assert verdict[measure]["worst_kind_mean"] == min(
            row[measure]["mean"]
            for k, row in kinds.items()
            if k != HEADLINE and not math.isnan(row[measure]["mean"])
        )
    assert (
        verdict["spec_only_normalized_accuracy"]["mean"] == kinds["spec only"]["normalized_accuracy"]["mean"]
    )


def test_the_page_shows_every_kind_and_each_market(published: list[dict]) -> None:
    page = render_markdown(combine(published))
    for kind in published[0]["kinds"]:
        assert kind in page
    assert "market seed 0:" in page and "market seed 1:" in page
    headline = combine(published)["kinds"][HEADLINE]["normalized_accuracy"]
    assert f"{headline['mean']:.3f} ± {headline['spread']:.3f}" in page


def test_runs_that_do_not_combine_are_refused(published: list[dict]) -> None:
    with pytest.raises(MarketsMismatch, match="at least two"):
        combine(published[:1])
    with pytest.raises(MarketsMismatch, match="market seeds repeat"):
        combine([published[0], published[0]])
    other_space = copy.deepcopy(published[1])
    other_space["space_id"] = "pave-000000000000000000000000"
    with pytest.raises(MarketsMismatch, match="space_id"):
        combine([published[0], other_space])
    no_kinds = {k: v for k, v in published[1].items() if k != "kinds"}
    with pytest.raises(MarketsMismatch, match="per-kind table"):
        combine([published[0], no_kinds])


def test_the_command_writes_json_and_page(tmp_path: Path) -> None:
    out = tmp_path / "markets.json"
    result = CliRunner().invoke(app, ["bench", "identify-markets", str(SEED0), str(SEED1), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text())["market_seeds"] == [0, 1]
    assert out.with_suffix(".md").read_text().startswith("# Identification over market seeds 0, 1")
    refused = CliRunner().invoke(
        app, ["bench", "identify-markets", str(SEED0), str(SEED0), "--out", str(out)]
    )
    assert refused.exit_code != 0
    assert "market seeds repeat" in refused.output


def test_full_profile_runs_combine_and_show_the_local_check() -> None:
    """The full profile's runs name no task list (every task of the datasets folder); the page
    names it so, and carries spec-only users checked on their own machine beside the verdict."""
    runs = [json.loads((DOCS / name).read_text()) for name in FULL]
    combined = combine(runs)
    assert combined["market_seeds"] == [0, 1, 2]
    assert combined["tasks"] is None
    local = combined["verdict"]["spec_only_checked_here_normalized_accuracy"]
    assert local["per_market"] == [r["spec_only_checked_here"]["normalized_accuracy"] for r in runs]
    page = render_markdown(combined)
    assert "every task of the datasets folder" in page
    assert "checked on their own machine" in page
    quick = json.loads(SEED0.read_text())
    with pytest.raises(MarketsMismatch, match="profiles"):
        combine([runs[1], quick])
