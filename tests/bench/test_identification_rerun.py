"""An identification run with some kinds rerun under newer code: the users swapped in, the table
recomputed from them, the commands kept, and a rerun of another market or user set refused."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from app.bench.identification_kinds import summarise
from app.bench.identification_rerun import RerunMismatch, with_rerun
from app.cli.main import app

RUN = Path(__file__).resolve().parents[2] / "docs" / "benchmarks" / "identification-quick.json"


@pytest.fixture(scope="module")
def run() -> dict:
    return json.loads(RUN.read_text())


def _rerun_of(run: dict, kind: str) -> dict:
    """A rerun of one kind in which every user's top match became perfect."""
    rerun = copy.deepcopy(run)
    rerun["kind_users"] = [
        {**u, "normalized_accuracy": 1.0, "oracle_agreement_at1": 1.0, "top1": "new"}
        for u in run["kind_users"]
        if u["kind"] == kind
    ]
    rerun["command"] = f"pavedock bench identify --profile quick --kind {kind!r}"
    rerun["spec_only_checked_here"] = {
        **(run.get("spec_only_checked_here") or {}),
        "normalized_accuracy": 0.5,
    }
    return rerun


def test_the_rerun_kind_is_swapped_in_and_the_table_recomputed(run: dict) -> None:
    kind = "spec only"
    merged = with_rerun(run, _rerun_of(run, kind))
    assert len(merged["kind_users"]) == len(run["kind_users"])
    assert [u["kind"] for u in merged["kind_users"]] == [u["kind"] for u in run["kind_users"]]
    assert all(u["top1"] == "new" for u in merged["kind_users"] if u["kind"] == kind)
    untouched = [u for u in merged["kind_users"] if u["kind"] != kind]
    assert untouched == [u for u in run["kind_users"] if u["kind"] != kind]
    assert merged["kinds"][kind]["normalized_accuracy"] == 1.0
    for other, row in run["kinds"].items():
        if other not in (kind, "mean over kinds"):
            assert merged["kinds"][other]["normalized_accuracy"] == pytest.approx(row["normalized_accuracy"])
    recomputed = summarise([(_Keyed(u), u) for u in merged["kind_users"]])
    assert json.dumps(merged["kinds"], sort_keys=True) == json.dumps(recomputed, sort_keys=True)
    assert merged["reruns"][0]["kinds"] == [kind] and "--kind 'spec only'" in merged["reruns"][0]["command"]
    assert merged["command"] == run["command"]
    assert merged["spec_only_checked_here"]["normalized_accuracy"] == 0.5


class _Keyed:
    def __init__(self, user: dict) -> None:
        self.kind, self.seed = user["kind"], int(user["seed"])


def test_a_rerun_of_another_market_or_other_users_is_refused(run: dict) -> None:
    other_market = {**_rerun_of(run, "spec only"), "market_seed": 7}
    with pytest.raises(RerunMismatch, match="another market"):
        with_rerun(run, other_market)
    fewer = _rerun_of(run, "spec only")
    fewer["kind_users"] = fewer["kind_users"][1:]
    with pytest.raises(RerunMismatch, match="1 missing"):
        with_rerun(run, fewer)
    with pytest.raises(RerunMismatch, match="another space_id"):
        with_rerun(run, {**_rerun_of(run, "spec only"), "space_id": "pave-other"})


def test_the_cli_writes_the_run_and_its_page(run: dict, tmp_path: Path) -> None:
    rerun = tmp_path / "rerun.json"
    rerun.write_text(json.dumps(_rerun_of(run, "spec only")))
    out = tmp_path / "merged.json"
    result = CliRunner().invoke(app, ["bench", "identify-rerun", str(RUN), str(rerun), "--out", str(out)])
    assert result.exit_code == 0, result.output
    page = out.with_suffix(".md").read_text()
    assert "users rerun" in page and "--kind 'spec only'" in page
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({**_rerun_of(run, "spec only"), "market_seed": 3}))
    refused = CliRunner().invoke(app, ["bench", "identify-rerun", str(RUN), str(bad), "--out", str(out)])
    assert refused.exit_code != 0 and "another market" in refused.output
