"""The identification benchmark end to end on its smoke profile: real MiniLM, real datasets,
one learnware per family and its corrupted twin, one seed of users."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from app.bench.identification import METHODS, run_identification_benchmark
from app.bench.rankings import RULES, read_records, replay, replay_metrics, replay_table, service, wide_view

pytestmark = pytest.mark.real_model

SCORES = ("oracle_agreement_at1", "normalized_accuracy", "quality_filter", "hit_at1", "hit_at5")


def test_smoke_profile_writes_every_key_the_issue_asks_for(datasets_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "identify.json"
    rankings = tmp_path / "rankings.jsonl"
    result = run_identification_benchmark(
        "smoke", out, datasets_dir, tmp_path / "cache", wide_check=20, rankings_out=rankings
    )
    saved = json.loads(out.read_text())
    assert saved["normalized_accuracy"] == result["normalized_accuracy"]
    assert {"pave", "pave_labels", "pave_club", "rkme"} <= set(METHODS)
    for prefix in ["" if method == "pave" else f"{method}_" for method in METHODS]:
        for key in SCORES:
            assert 0.0 <= saved[prefix + key] <= 1.0, prefix + key
    assert saved["spec_seconds_median"] > 0 and saved["spec_seconds_p95"] >= saved["spec_seconds_median"]
    assert 0 < saved["spec_floats"] < 0.01 * saved["base_params"]
    assert [point["recipe"] for point in saved["steps_curve"]][1:] == ["plain-1grad", "adam-1"]
    for point in saved["steps_curve"]:
        assert 0.0 <= point["labels_normalized_accuracy"] <= 1.0
    # Every user's own learnware speaks its label set: the label tiers never do worse at top-1 here.
    assert saved["pave_labels_normalized_accuracy"] >= saved["normalized_accuracy"] - 1e-9
    # Every kind of user task has its row, as the service ranks, and the mean over kinds.
    kinds = saved["kinds"]
    assert {"same names", "synonyms", "codes", "case and order", "french", "4 shots", "16 shots"} <= set(
        kinds
    )
    # The renamings held out from every rule's choice have their rows too, each user renamed.
    assert {"other wording", "german"} <= set(kinds)
    held_out = [u for u in saved["kind_users"] if u["kind"] in ("other wording", "german")]
    assert held_out and all(u["label_names"] for u in held_out)
    assert {"neg", "pos"} <= {n for u in held_out for n in u["label_names"]}
    assert {
        "spec only",
        "label subset",
        "label subset, synonyms",
        "no own learnware",
        "mean over kinds",
    } <= set(kinds)
    for kind, row in kinds.items():
        for key in ("oracle_agreement_at1", "normalized_accuracy", "hit_at1"):
            assert row[key] != row[key] or 0.0 <= row[key] <= 1.0 + 1e-9, (kind, key)  # NaN: no user applies
    assert all(u["top1_reason"] for u in saved["kind_users"])
    # Coded users of the two-label tasks are compared with the two-class learnwares under their
    # own names (sst2's and mr's "negative" / "positive", sms_spam's "ham" / "spam"), and a match
    # scored so says it; spec-only users never are (their examples stay at home).
    binary_codes = [u for u in saved["kind_users"] if u["kind"] == "codes" and u["label_names"] == ["0", "1"]]
    assert binary_codes and saved["realigned_users"] >= len(binary_codes)
    assert saved["realign_sets_median"] >= 1 and saved["realign_seconds_median"] > 0
    assert any("refitted under its label names" in u["top1_reason"] for u in binary_codes)
    assert not any("refitted" in u["top1_reason"] for u in saved["kind_users"] if u["kind"] == "spec only")
    # Spec-only users again as `pavedock task --local` ranks for them, checked on their machine:
    # reported beside the kinds (not one of them), each user's figures kept.
    here = saved["spec_only_checked_here"]
    spec_only_users = [u for u in saved["kind_users"] if u["kind"] == "spec only"]
    assert here["users"] == len(spec_only_users) and "spec only, checked here" not in kinds
    assert all(0.0 <= u["checked_here"]["normalized_accuracy"] <= 1.0 + 1e-9 for u in spec_only_users)
    assert all(u["checked_here"]["top1"] for u in spec_only_users)
    assert "pavedock task --local" in (tmp_path / "identify.md").read_text()
    # The same users under a wider check (20 candidates, named or not), beside the service's:
    # every kind whose examples reach the dock, each with the users the service ranked.
    wide = saved["wide_check"]
    assert wide["k"] == 20 and "spec only" not in wide["kinds"]
    assert {k: v["users"] for k, v in wide["kinds"].items() if k != "mean over kinds"} == {
        k: v["users"] for k, v in kinds.items() if k not in ("spec only", "mean over kinds")
    }
    assert "## A wider check: 20 candidates" in (tmp_path / "identify.md").read_text()
    assert "--wide-check 20" in saved["command"]
    variants = {lw["variant"] for lw in saved["learnwares"]}
    assert variants == {"good", "corrupted", "noisy", "small"}
    # A corrupted twin is bad under every label map, not an inverted classifier (the smoke
    # profile's 4-step LoRA learnwares are barely trained either way).
    by_key = {lw["key"]: lw for lw in saved["learnwares"]}
    for lw in saved["learnwares"]:
        if lw["variant"] == "corrupted" and lw["family"] != "lora":
            good = by_key[lw["key"].rsplit("-", 1)[0] + "-good"]
            assert lw["best_map_test_accuracy"] < good["test_accuracy"], lw["key"]
    beyond = saved["beyond"]["methods"]
    assert {
        "PAVE♦ (top-1 fine-tuned)",
        "PAVE♦, top 5 checked on the shots",
        "RKME top-1 fine-tuned",
        "Base fine-tuned",
        "Oracle fine-tuned",
    } <= set(beyond)
    for name in ("identify.md", "identify.png"):
        assert (tmp_path / name).stat().st_size > 0
    # Every user's whole ranking, recorded for replays: replayed as recorded, it gives each
    # user's own figures back, and the replay of another rule runs on the same records.
    records = read_records([rankings])
    assert [(r["kind"], r["task"], r["seed"]) for r in records] == [
        (u["kind"], u["task"], u["seed"]) for u in saved["kind_users"]
    ]
    for record, user in zip(records, saved["kind_users"], strict=True):
        replayed = replay_metrics(record, service(record))
        for value, key in zip(
            replayed, ("normalized_accuracy", "oracle_agreement_at1", "quality_filter"), strict=True
        ):
            assert (value != value and user[key] != user[key]) or value == pytest.approx(user[key]), (
                user,
                key,
            )
        assert record["ranked"][0]["key"] == user["top1"]
        assert (record["oracle_id"] is None) == (record["oracle_by_name"] is None)
    # The wider check's rankings are kept beside the service's, and replayed the same way: each
    # user's wide figures back from the wide ranking's own order.
    wide_users = [(record, wide_view(record)) for record in records if record["kind"] != "spec only"]
    assert wide_users and all(view is not None for _, view in wide_users)
    assert all("wide" not in record for record in records if record["kind"] == "spec only")
    for record, view in wide_users:
        assert view is not None and record["wide"]["check"] == 20
        assert sum(row.get("checked", False) for row in view["ranked"]) >= sum(
            row.get("checked", False) for row in record["ranked"]
        )
    wide_views = [view for _, view in wide_users if view is not None]
    wide_mean = replay(wide_views, service)["mean over kinds"]["normalized_accuracy"]
    assert wide_mean == pytest.approx(wide["kinds"]["mean over kinds"]["normalized_accuracy"])
    table = replay_table(records, ["service", "agreement-added-1", "best-checked (hindsight)"])
    assert "| **mean over kinds** |" in table and "| same names |" in table
    service_mean = replay(records, service)["mean over kinds"]["normalized_accuracy"]
    assert service_mean == pytest.approx(
        np.nanmean([v["normalized_accuracy"] for k, v in kinds.items() if k != "mean over kinds"])
    )
    assert (
        replay(records, RULES["best-checked (hindsight)"])["mean over kinds"]["normalized_accuracy"]
        >= service_mean - 1e-9
    )


def test_another_market_seed_is_another_market(datasets_dir: Path, tmp_path: Path) -> None:
    """A market seed the rules were not chosen on: each task's learnwares change family (so other
    tasks get graded variants), and the labels a corrupted twin draws change with it."""
    from app.bench.identification import PROFILES, Cache, Market

    profile = PROFILES["smoke"]
    markets = [
        Market(profile, datasets_dir, Cache(tmp_path / str(seed)), space=None, seed=seed)  # type: ignore[arg-type]
        for seed in (0, 1)
    ]
    plans = [market.plan() for market in markets]
    families = [{task: family for task, family, _ in plan} for plan in plans]
    assert set(families[0]) == set(families[1]) == set(profile.tasks or ())
    assert all(families[0][task] != families[1][task] for task in families[0])
    # Every task still has its good learnware and its corrupted twin in both markets.
    for plan in plans:
        for task in families[0]:
            assert {(task, "good"), (task, "corrupted")} <= {(t, v) for t, _, v in plan}
    corrupted = [market._training_set("sst2", "corrupted").labels for market in markets]
    assert len(corrupted[0]) == len(corrupted[1]) and (corrupted[0] != corrupted[1]).any()


def test_unseen_examples_are_outside_every_learnwares_training_set(
    datasets_dir: Path, tmp_path: Path
) -> None:
    """What the `unseen examples` users draw from: the train split less the capped set every
    variant of the task trains on, no text repeated from it; nothing where the cap takes it all."""
    from dataclasses import replace

    from app.bench.identification import PROFILES, Cache, Market

    profile = replace(PROFILES["smoke"], tasks=("sst2", "uci_amazon"), train_cap=1000)
    market = Market(profile, datasets_dir, Cache(tmp_path), space=None, seed=1)  # type: ignore[arg-type]
    unseen = market.unseen("sst2")
    assert unseen is not None
    trained = {
        text
        for variant in ("good", "small", "noisy", "corrupted")
        for text in market._training_set("sst2", variant).texts
    }
    assert len(trained) <= 1000 and not trained & set(unseen.texts)
    assert len(unseen) + 1000 >= len(market.tasks["sst2"]) - 50  # few texts repeat in sst2
    assert set(unseen.labels.tolist()) == {0, 1}
    assert market.unseen("uci_amazon") is None  # its 800 examples are all within the cap


def test_a_learnware_the_dock_would_refuse_is_left_out_of_the_market(
    datasets_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A twin trained on 95% random labels can collapse to one class on its declared inputs (as
    the full profile's ag_news LoRA twin does); the dock refuses such an upload, so the market
    leaves it out, says why, and its task's users have no quality filter to measure."""
    from app.bench.identification import PROFILES, Cache, Market, _user_metrics
    from app.ml.identify import Match

    profile = PROFILES["smoke"]
    cache = Cache(tmp_path / "cache")
    market = Market(profile, datasets_dir, cache, space=None, seed=0)  # type: ignore[arg-type]
    plan = [("sst2", "onnx", "good"), ("sst2", "onnx", "corrupted"), ("trec", "onnx", "good")]
    monkeypatch.setattr(Market, "plan", lambda self: plan)
    # Train the packages, then give the twin the answers of a collapsed model: every declared
    # input read as "negative" with certainty.
    for task, family, variant in plan:
        market._package(task, family, variant)
    probs = np.zeros((profile.spec_inputs, 2), np.float32)
    probs[:, 0] = 1.0
    np.save(cache.path("arrays", f"pred-sst2-onnx-random95-{profile.spec_inputs}.npy"), probs)

    market.build()

    assert [lw.key for lw in market.learnwares] == ["sst2-onnx-good", "trec-onnx-good"]
    assert [lw.id for lw in market.learnwares] == [0, 1]
    assert [r["key"] for r in market.refused] == ["sst2-onnx-random95"]
    assert "predicts a single class" in market.refused[0]["reason"]
    metrics = _user_metrics(market, "sst2", [Match(0, 0.9), Match(1, 0.1)])
    assert np.isnan(metrics["quality_filter"]) and metrics["hit_at1"] == 1.0


def test_a_run_of_some_kinds_names_known_ones(tmp_path: Path) -> None:
    """`--kind` keeps some kinds of user task (a cheaper run for a rule that touches only them);
    a misspelt kind is refused before anything is built."""
    with pytest.raises(ValueError, match=r"unknown kinds \['code'\]"):
        run_identification_benchmark(
            "smoke", tmp_path / "out.json", tmp_path, tmp_path / "cache", only_kinds=("codes", "code")
        )
    assert not (tmp_path / "cache").exists()


def test_a_run_of_some_tasks_names_the_market_s_own(datasets_dir: Path, tmp_path: Path) -> None:
    """`--task` keeps the users of some tasks (a partial run, for rankings to replay); a task the
    market does not have is refused before a learnware is trained."""
    with pytest.raises(ValueError, match=r"unknown tasks \['sst3'\]"):
        run_identification_benchmark(
            "smoke", tmp_path / "out.json", datasets_dir, tmp_path / "cache", only_tasks=("sst2", "sst3")
        )
    assert not [path for path in (tmp_path / "cache").rglob("*") if path.is_file()]
