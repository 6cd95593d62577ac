"""The identification benchmark (BENCHMARK.md "Identification"), on the real text tasks.

Market: for each task a **good** learnware (true labels) and a **corrupted** twin (most
training labels replaced by wrong ones), of one of three families assigned round-robin:
LoRA adapters with the label-name head, a linear head on frozen base embeddings (a
transformers sequence-classification directory), and TF-IDF + logistic regression in ONNX.
Every learnware is a real package run through the dock's own runners, and its spec is
fitted to its own predictions on the inputs it declares.

Users: 8 shots per class (at most 64) from the train split, seeds 0, 1, 2; accuracy on
the (capped) test split.

A learnware *serves* a task when its label set equals the task's (matched by name);
otherwise it cannot give the user's labels and scores 0 for it. The oracle is the best
serving learnware in hindsight.

"Beyond the original purpose" removes every learnware of the user's task and compares,
over the LoRA learnwares (the family whose head takes any label names): PAVE's top-1
zero-shot and fine-tuned on the shots (PAVE♦), RKME's top-1 fine-tuned, a random
learnware fine-tuned, the zero-shot oracle fine-tuned, and the base fine-tuned.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from app.bench import identification_kinds as kinds
from app.bench.rankings import ranking_record, wide_record
from app.bench.report import machine, md_table, percentile, write_json
from app.ml.data import TextTask, few_shot, load_task, text_task_names
from app.ml.identify import Match, rank_specs
from app.ml.label_maps import LabelMap, answers, map_by_examples, map_by_name
from app.ml.packages import LearnwarePackage
from app.ml.pave import fit_pave_spec
from app.ml.ranking import SHOT_CHECK_K, SHOT_CHECK_K_UNNAMED, Candidate, ShotScore, by_tier, shot_score
from app.ml.runners.base import Predictions
from app.ml.shot_check import RememberedAnswers
from app.ml.spec_space import FitRecipe, SpecSpace, load_space

log = logging.getLogger(__name__)

FAMILIES = ("lora", "linear", "onnx")
VARIANTS = ("good", "corrupted", "noisy", "small")
CLI_TOP_K = 10
"""How many matches `pavedock task` asks for by default (``--top-k``): the ones it can check on a
spec-only user's own machine (`DockClient.check_here`)."""
CHECKED_HERE = "spec only, checked here"
"""Spec-only users as `pavedock task --local` ranks for them: reported beside the kinds, not one of
them (the mean over kinds stays comparable with earlier runs)."""
VARIANT_FILES = {"good": "good", "corrupted": "random95", "noisy": "noisy40", "small": "small5"}
# Six tasks, two per family, with a sentiment pair (sst2, mr) whose learnwares serve each other.
QUICK_TASKS = ("sst2", "sms_spam", "trec", "mr", "ag_news", "tweet_emotion")
COVER_TASKS = ("sst2", "tweet_sentiment", "sst5", "banking77", "clinc150", "snips")


@dataclass(frozen=True)
class BenchProfile:
    name: str
    tasks: tuple[str, ...] | None
    test_cap: int
    spec_inputs: int
    seeds: tuple[int, ...]
    curve: tuple[tuple[str, int, bool], ...]
    """(label, steps, balanced) recipes of the steps-versus-quality curve."""
    curve_seeds: tuple[int, ...]
    beyond_seeds: tuple[int, ...]
    beyond_tasks: tuple[str, ...] | None
    """Users of these tasks in the beyond comparison (None: every task of the profile)."""
    beyond_test_cap: int
    finetune_steps: int
    lora_steps: int
    train_cap: int


QUICK = BenchProfile(
    name="quick",
    tasks=QUICK_TASKS,
    test_cap=200,
    spec_inputs=128,
    seeds=(0, 1, 2),
    curve=(("plain-1grad", 0, False), ("adam-1", 1, True), ("adam-10", 10, True)),
    curve_seeds=(0,),
    beyond_seeds=(0,),
    beyond_tasks=None,
    beyond_test_cap=150,
    finetune_steps=15,
    lora_steps=80,
    train_cap=2000,
)
"""Minutes: six tasks, two per family, with a sentiment pair (sst2, mr) that serve each other."""

PROFILES = {
    # About a minute, for the test of the benchmark's plumbing: every family (two LoRA tasks, so
    # the beyond comparison has a candidate), one seed.
    "smoke": BenchProfile(
        name="smoke",
        tasks=("sst2", "sms_spam", "trec", "mr"),
        test_cap=40,
        spec_inputs=32,
        seeds=(0,),
        curve=(("plain-1grad", 0, False), ("adam-1", 1, True)),
        curve_seeds=(0,),
        beyond_seeds=(0,),
        beyond_tasks=("sst2",),
        beyond_test_cap=30,
        finetune_steps=2,
        lora_steps=4,
        train_cap=200,
    ),
    "quick": QUICK,
    # Tasks none of the ranking's rules were chosen on, picked for how their label sets relate:
    # sst2 ⊂ tweet_sentiment ⊂ sst5 by name (subsets served by restriction, supersets the smaller
    # learnwares cannot answer) and two many-class intent tasks (banking77, clinc150) whose label
    # subsets users ask for, with snips beside them.
    "cover": replace(QUICK, name="cover", tasks=COVER_TASKS, test_cap=600, train_cap=4000),
    "full": BenchProfile(
        name="full",
        tasks=None,
        test_cap=400,
        spec_inputs=256,
        seeds=(0, 1, 2),
        curve=(("plain-1grad", 0, False), ("adam-1", 1, True), ("adam-10", 10, True), ("adam-50", 50, True)),
        curve_seeds=(0,),
        # Eight tasks over the three families, three seeds of users (24): each user fine-tunes up
        # to six models, and each task needs every candidate's zero-shot accuracy (about 1 min
        # per user on this machine's two threads). One seed was too few: the means moved by 0.01
        # between one and two torch threads, as much as the rows differed.
        beyond_seeds=(0, 1, 2),
        beyond_tasks=("ag_news", "sst2", "mr", "trec", "sms_spam", "tweet_emotion", "banking77", "uci_yelp"),
        beyond_test_cap=200,
        finetune_steps=20,
        lora_steps=120,
        train_cap=4000,
    ),
}


@dataclass
class Learnware:
    id: int
    task: str
    family: str
    variant: str
    """``good``; ``corrupted`` (95% of its training labels drawn at random: bad under every label
    map); or, graded, ``noisy`` (40% drawn at random) and ``small`` (5% of the training data)."""
    package_dir: Path
    label_names: list[str]
    inputs: list[str]
    model_format: str

    @property
    def corrupted(self) -> bool:
        return self.variant == "corrupted"

    @property
    def key(self) -> str:
        return f"{self.task}-{self.family}-{VARIANT_FILES[self.variant]}"


class Cache:
    """Files under one folder, keyed by name: learnware packages, predictions, specs, scores."""

    def __init__(self, root: Path):
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def path(self, *parts: str) -> Path:
        path = self.root.joinpath(*parts)
        path.parent.mkdir(parents=True, exist_ok=True)
        return path

    def array(self, name: str, make: Any) -> np.ndarray:
        path = self.path("arrays", f"{name}.npy")
        if path.is_file():
            return np.load(path)
        value = np.asarray(make())
        np.save(path, value)
        return value

    def number(self, name: str, make: Any) -> float:
        path = self.path("numbers", f"{name}.json")
        if path.is_file():
            return float(json.loads(path.read_text()))
        value = float(make())
        path.write_text(json.dumps(value))
        return value


def _tag(recipe: FitRecipe) -> str:
    return hashlib.sha256(json.dumps(asdict(recipe), sort_keys=True).encode()).hexdigest()[:10]


# The rankings compared, by their key in the results (summary keys are prefixed "<key>_", PAVE's
# by cosine alone unprefixed), with their names in the Markdown table.
METHODS = {
    "pave": "PAVE, cosine alone",
    "pave_labels": "PAVE, tiers by what a learnware can answer, then cosine (no shot check)",
    "pave_club": "PAVE♣ (true labels), cosine alone",
    "rkme": "RKME",
}


def _prefix(method: str) -> str:
    return "" if method == "pave" else f"{method}_"


def _tiered(ranking: list[Match], names_of: dict[int, list[str]], user_names: list[str]) -> list[Match]:
    """A cosine ranking in the service's tiers (what each learnware can answer), cosine within."""
    candidates = [Candidate(m.id, m.score, tuple(names_of[m.id])) for m in ranking]
    return [Match(c.id, c.score) for c in by_tier(candidates, user_names)]


class Market:
    """The benchmark's learnwares, their runners, accuracies and specs (all cached)."""

    def __init__(
        self, profile: BenchProfile, datasets: Path, cache: Cache, space: SpecSpace, *, seed: int = 0
    ):
        self.profile = profile
        self.seed = seed
        """The market's seed: which family each task's learnwares are (rotated by it), the seed of
        their training and of the labels their graded and corrupted variants draw. Seed 0 is the
        published market; another seed is a market the ranking's rules were not chosen on."""
        self.datasets = datasets
        self.cache = cache
        self.space = space
        names = profile.tasks or tuple(text_task_names(datasets))
        self.tasks: dict[str, TextTask] = {}
        self.tests: dict[str, TextTask] = {}
        for name in names:
            self.tasks[name] = load_task(datasets, name, "train")
            self.tests[name] = load_task(datasets, name, "test", limit=profile.test_cap)
        self.learnwares: list[Learnware] = []
        self.refused: list[dict[str, str]] = []
        """Learnwares trained for the market that the dock would refuse at upload (key, reason):
        left out of the market, as the dock leaves them out of its index."""
        self._runners: dict[int, Any] = {}
        self._packages: dict[int, LearnwarePackage] = {}
        self._declared_answers = RememberedAnswers(capacity=500_000)
        """What each learnware answered on declared inputs (its own and its peers'), as a worker
        remembers them: every user's agreement check pools the same few hundred of them."""

    def plan(self) -> list[tuple[str, str, str]]:
        """(task, family, variant) of each learnware the market holds."""
        families = {name: FAMILIES[(i + self.seed) % len(FAMILIES)] for i, name in enumerate(self.tasks)}
        return [
            (name, family, variant)
            for name, family in families.items()
            # Graded learnwares where they are cheap to train (not the LoRA family).
            for variant in (VARIANTS if family != "lora" else VARIANTS[:2])
        ]

    def build(self) -> None:
        """Train (or load) each planned learnware and admit those the dock would admit. A
        learnware's id is its position among the admitted ones."""
        from app.ml.packages import extract_package

        for name, family, variant in tqdm(self.plan(), desc="market: learnwares"):
            zip_path = self._package(name, family, variant)
            dest = self.cache.path("extracted", zip_path.stem)
            shutil.rmtree(dest, ignore_errors=True)
            package = extract_package(zip_path, dest)
            lw = Learnware(
                id=len(self.learnwares),
                task=name,
                family=family,
                variant=variant,
                package_dir=dest,
                label_names=list(package.manifest.label_names),
                inputs=list(package.inputs)[: self.profile.spec_inputs],
                model_format=package.manifest.model_format,
            )
            self._packages[lw.id] = package
            reason = self._refusal(lw)
            if reason is None:
                self.learnwares.append(lw)
            else:
                log.warning("market: %s left out, as the dock would refuse it: %s", lw.key, reason)
                self.refused.append({"key": lw.key, "reason": reason})
                self._packages.pop(lw.id)
                self._runners.pop(lw.id, None)

    def _refusal(self, lw: Learnware) -> str | None:
        """Why the dock's upload validation would refuse ``lw`` (its answers on its declared
        inputs, as ``app.ml.validation`` checks them), or None."""
        from app.ml.errors import InvalidPackage
        from app.ml.validation import check_answers

        answers_on_inputs = self.predictions(lw)
        probs = answers_on_inputs if answers_on_inputs.ndim == 2 else None
        labels = answers_on_inputs.argmax(axis=1) if probs is not None else answers_on_inputs.astype(np.int64)
        try:
            check_answers(labels, probs, lw.label_names)
        except InvalidPackage as refused:
            return str(refused)
        return None

    def _capped(self, name: str) -> np.ndarray:
        """Positions in the train split of the examples every learnware of the task draws its
        training set from (all of them where the split is within the profile's cap)."""
        size = len(self.tasks[name])
        if size <= self.profile.train_cap:
            return np.arange(size)
        return np.random.default_rng(self.seed).choice(size, self.profile.train_cap, replace=False)

    def unseen(self, name: str) -> TextTask | None:
        """The task's train examples that no learnware of this market trained on: outside the
        capped set every variant draws from, and no text repeated from it. What a user who brings
        their own data has; None where the cap takes the whole split (uci_amazon's 800)."""
        train = self.tasks[name]
        seen_texts = {train.texts[i] for i in self._capped(name).tolist()}
        rest = [i for i, text in enumerate(train.texts) if text not in seen_texts]
        return train.subset(rest) if rest else None

    def _training_set(self, name: str, variant: str) -> TextTask:
        """The capped train split, as the variant sees it (labels drawn uniformly at random for a
        share of the examples: unlike a flipped label, a random one carries no inverted signal)."""
        train = self.tasks[name].subset(self._capped(name))
        rng = np.random.default_rng([self.seed, 1009])
        if variant == "small":
            return train.subset(np.sort(rng.choice(len(train), max(40, len(train) // 20), replace=False)))
        share = {"corrupted": 0.95, "noisy": 0.4}.get(variant, 0.0)
        labels = train.labels.copy()
        drawn = rng.random(len(labels)) < share
        labels[drawn] = rng.integers(0, len(train.label_names), size=int(drawn.sum()))
        return TextTask(train.name, train.split, train.texts, labels, train.label_names)

    def _package(self, name: str, family: str, variant: str) -> Path:
        from app.bench import builders

        path = self.cache.path("packages", f"{name}-{family}-{VARIANT_FILES[variant]}.zip")
        if path.is_file():
            return path
        train = self._training_set(name, variant)
        tmp = path.with_suffix(".tmp.zip")
        if family == "lora":
            builders.train_lora_learnware(
                train, tmp, steps=self.profile.lora_steps, seed=self.seed, n_inputs=self.profile.spec_inputs
            )
        elif family == "linear":
            builders.train_linear_head_learnware(
                train, tmp, seed=self.seed, n_inputs=self.profile.spec_inputs
            )
        else:
            builders.train_tfidf_onnx_learnware(train, tmp, seed=self.seed, n_inputs=self.profile.spec_inputs)
        tmp.replace(path)
        return path

    def runner(self, lw: Learnware) -> Any:
        from app.ml.runners import load_runner

        if lw.id not in self._runners:
            self._runners[lw.id] = load_runner(self._packages[lw.id])
        return self._runners[lw.id]

    def predict(self, lw: Learnware, texts: list[str]) -> Predictions:
        return self.runner(lw).predict(texts)

    def predict_declared(self, lw: Learnware, texts: list[str]) -> Predictions:
        """``lw``'s answers on declared inputs, each run once per market (`RememberedAnswers`)."""
        return self._declared_answers.predict(lw.key, self.runner(lw), texts)

    def test_predictions(self, lw: Learnware, task: str) -> Predictions:
        """``lw``'s answers (its own class ids) and probabilities on ``task``'s capped test split."""
        stem = f"test-{lw.key}-on-{task}-{self.profile.test_cap}"
        once: list[Predictions] = []

        def run() -> Predictions:
            if not once:
                once.append(self.predict(lw, self.tests[task].texts))
            return once[0]

        labels = self.cache.array(f"{stem}-labels", lambda: run().labels)
        probs = self.cache.array(
            f"{stem}-probs", lambda: p if (p := run().probs) is not None else np.zeros(0, np.float32)
        )
        return Predictions(labels.astype(np.int64), probs if probs.size else None)

    def accuracy(self, lw: Learnware, task: str) -> float:
        """Test accuracy of ``lw`` on ``task`` (0 when it cannot give the task's labels by name)."""
        test = self.tests[task]
        label_map = map_by_name(test.label_names, lw.label_names)
        if label_map is None or len(lw.label_names) != len(test.label_names):
            return 0.0
        predicted = self.test_predictions(lw, task)
        answered, _ = answers(predicted.labels, predicted.probs, label_map)
        return float(np.mean(answered == test.labels))

    def best_map_accuracy(self, lw: Learnware) -> float:
        """Test accuracy on its own task under the best one-to-one label map in hindsight: a
        corrupted twin must be bad under every map (not an inverted classifier)."""
        test = self.tests[lw.task]
        predicted = self.test_predictions(lw, lw.task)
        n = len(test.label_names)
        best = map_by_examples(predicted.labels, None, test.labels, n, len(lw.label_names))
        answered, _ = answers(predicted.labels, None, best)
        return float(np.mean(answered == test.labels))

    def predictions(self, lw: Learnware) -> np.ndarray:
        """The learnware's probabilities (or labels) on its declared inputs: its h(x)."""

        def compute() -> np.ndarray:
            out = self.runner(lw).predict(lw.inputs)
            return out.probs if out.probs is not None else out.labels

        return self.cache.array(f"pred-{lw.key}-{len(lw.inputs)}", compute)

    def true_labels(self, lw: Learnware) -> np.ndarray:
        train = self.tasks[lw.task]
        lookup = dict(zip(train.texts, train.labels.tolist(), strict=True))
        return np.asarray([lookup[t] for t in lw.inputs], dtype=np.int64)

    def model_spec(self, lw: Learnware, recipe: FitRecipe, *, true_labels: bool = False) -> np.ndarray:
        targets = self.true_labels(lw) if true_labels else self.predictions(lw)
        name = f"spec-{lw.key}-{_tag(recipe)}-{'true' if true_labels else 'pred'}-{len(lw.inputs)}"
        return self.cache.array(
            name,
            lambda: (
                fit_pave_spec(
                    self.space, lw.inputs, targets, lw.label_names, kind="model", recipe=recipe
                ).vector
            ),
        )


def _tie_block(ranking: list[Match], position: int) -> tuple[int, int]:
    """(start, size) of the run of equal scores around `position`: ties are broken at random
    within a run. A re-ranked list (label tiers) is not sorted by score, so only neighbours tie."""
    score = ranking[position].score
    start = position
    while start > 0 and abs(ranking[start - 1].score - score) <= 1e-9:
        start -= 1
    end = position + 1
    while end < len(ranking) and abs(ranking[end].score - score) <= 1e-9:
        end += 1
    return start, end - start


def _user_metrics(market: Market, task: str, ranking: list[Match]) -> dict[str, float]:
    """Metrics of one ranking, read in its order. Ties are broken at random (in expectation):
    identical specs, as RKME or PAVE♣ give a learnware and its corrupted twin, earn no quality by
    id order."""
    own = {lw.variant: lw.id for lw in market.learnwares if lw.task == task}
    position = {m.id: i for i, m in enumerate(ranking)}
    _, top_size = _tie_block(ranking, 0)
    tied = [m.id for m in ranking[:top_size]]
    test_names = market.tests[task].label_names
    serving = [
        market.accuracy(lw, task) for lw in market.learnwares if sorted(lw.label_names) == sorted(test_names)
    ]
    oracle = max(serving, default=0.0)
    top_accs = [market.accuracy(market.learnwares[i], task) for i in tied]
    # A learnware the dock would refuse is not in the market: without its good learnware a task's
    # users have no hits to measure, without its corrupted twin no quality filter.
    hit_at1 = hit_at5 = quality = float("nan")
    if "good" in own:
        good_start, good_size = _tie_block(ranking, position[own["good"]])
        good = position[own["good"]]
        hit_at1 = (1.0 / len(tied)) if own["good"] in tied else 0.0
        hit_at5 = float(min(1.0, max(0.0, (5 - good_start) / good_size)))
        if "corrupted" in own:
            bad = position[own["corrupted"]]
            twins_tied = good_start <= bad < good_start + good_size
            quality = 0.5 if twins_tied else (1.0 if good < bad else 0.0)
    return {
        "hit_at1": hit_at1,
        "hit_at5": hit_at5,
        "quality_filter": quality,
        "oracle_agreement_at1": float(np.mean([a >= oracle - 0.01 for a in top_accs])),
        "normalized_accuracy": float(np.mean(top_accs)) / oracle if oracle > 0 else 0.0,
        "top1_accuracy": float(np.mean(top_accs)),
        "oracle_accuracy": oracle,
    }


def _mean_metrics(results: list[dict[str, float]]) -> dict[str, float]:
    """Mean of each metric over the users that have it (NaN: not measurable for that user)."""
    out = {}
    for key in results[0]:
        values = np.asarray([r[key] for r in results], dtype=np.float64)
        out[key] = float(np.nanmean(values)) if np.any(~np.isnan(values)) else float("nan")
    return out


def _users(market: Market, seeds: tuple[int, ...]) -> Iterator[tuple[str, int, TextTask]]:
    for task in market.tasks:
        for seed in seeds:
            yield task, seed, few_shot(market.tasks[task], per_class=8, max_total=64, seed=seed)


def run_identification_benchmark(
    profile_name: str,
    out: Path,
    datasets: Path,
    cache_dir: Path,
    *,
    head: str | None = None,
    extras: bool = True,
    market_seed: int = 0,
    only_kinds: Sequence[str] = (),
    only_tasks: Sequence[str] = (),
    wide_check: int = 0,
    rankings_out: Path | None = None,
) -> dict[str, Any]:
    """Run the benchmark, write ``out`` (JSON), ``out.md`` and ``out.png``; return the results.
    ``rankings_out``: also write each user's whole ranking there, one JSON line each, for replays
    (`app.bench.rankings`).
    ``market_seed`` builds another market of the same tasks (its own cache folder);
    ``only_kinds`` keeps those kinds of user task, ``only_tasks`` the users of those tasks (all
    when empty: a partial run's mean over kinds is not the headline; the market is the same);
    ``wide_check`` > 0 also ranks every user whose examples reach the dock with that many
    candidates checked whether or not one answers by name (kept in the rankings as ``wide``)."""
    if profile_name not in PROFILES:
        raise ValueError(f"unknown profile {profile_name!r}; known: {sorted(PROFILES)}")
    unknown = sorted(set(only_kinds) - set(kinds.KINDS))
    if unknown:
        raise ValueError(f"unknown kinds {unknown}; known: {list(kinds.KINDS)}")
    chosen_kinds = tuple(k for k in kinds.KINDS if k in only_kinds) if only_kinds else kinds.KINDS
    profile = PROFILES[profile_name]
    started = time.perf_counter()
    space = load_space()
    default = replace(space.config.recipe, head=head) if head else space.config.recipe
    cache = Cache(cache_dir / (profile.name if market_seed == 0 else f"{profile.name}-market{market_seed}"))
    market = Market(profile, datasets, cache, space, seed=market_seed)
    unknown_tasks = sorted(set(only_tasks) - set(market.tasks))
    if unknown_tasks:
        raise ValueError(f"unknown tasks {unknown_tasks}; this market's: {list(market.tasks)}")
    market.build()
    lws = market.learnwares

    own_acc = {lw.key: market.accuracy(lw, lw.task) for lw in tqdm(lws, desc="market: test accuracy")}

    def model_specs(recipe: FitRecipe, true_labels: bool = False) -> dict[int, np.ndarray]:
        return {
            lw.id: market.model_spec(lw, recipe, true_labels=true_labels)
            for lw in tqdm(
                lws, desc=f"model specs steps={recipe.steps}{' (true labels)' if true_labels else ''}"
            )
        }

    pave_specs = model_specs(default)
    club_specs = model_specs(default, true_labels=True)
    rkme_rank = _rkme_ranker(market)

    per_user: list[dict[str, Any]] = []
    by_method: dict[str, list[dict[str, float]]] = {method: [] for method in METHODS}
    names_of = {lw.id: lw.label_names for lw in lws}
    spec_seconds: list[float] = []
    search_seconds: list[float] = []

    def chosen(task: str) -> bool:
        return not only_tasks or task in only_tasks

    cosine_users = [u for u in _users(market, profile.seeds) if chosen(u[0])]
    for task, seed, shots in tqdm(cosine_users, desc="users: cosine rankings"):
        t0 = time.perf_counter()
        user = fit_pave_spec(space, shots.texts, shots.labels, shots.label_names, kind="task", recipe=default)
        spec_seconds.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        pave_ranking = rank_specs(user.vector, pave_specs)
        search_seconds.append(time.perf_counter() - t0)
        rankings = {
            "pave": pave_ranking,
            "pave_labels": _tiered(pave_ranking, names_of, shots.label_names),
            "pave_club": rank_specs(user.vector, club_specs),
            "rkme": rkme_rank(shots.texts),
        }
        row: dict[str, Any] = {"task": task, "seed": seed, "shots": len(shots)}
        for method, ranking in rankings.items():
            metrics = _user_metrics(market, task, ranking)
            by_method[method].append(metrics)
            row[method] = {**metrics, "top1": lws[ranking[0].id].key}
        per_user.append(row)

    kind_rows: list[tuple[kinds.User, dict[str, float]]] = []
    realign_seconds: list[tuple[int, float, int]] = []
    kind_users: list[dict[str, Any]] = []
    ranking_lines = None if rankings_out is None else rankings_out.open("w", encoding="utf-8")
    here_rows: list[tuple[kinds.User, dict[str, float]]] = []
    wide_rows: list[tuple[kinds.User, dict[str, float]]] = []
    for user in tqdm(
        [u for u in kinds.users(market, profile.seeds, chosen_kinds) if chosen(u.task)],
        desc="users: as the service ranks",
    ):
        shots = user.shots
        vector = fit_pave_spec(
            space, shots.texts, shots.labels, shots.label_names, kind="task", recipe=default
        ).vector
        checks: dict[int, Any] = {}
        found: dict[str, Any] = {}
        ranked = kinds.service_ranking(
            market,
            user,
            vector,
            pave_specs,
            space,
            realign_seconds=realign_seconds,
            checks=checks,
            found=found,
        )
        metrics = kinds.measure(market, user, ranked)
        kind_rows.append((user, metrics))
        record = None if ranking_lines is None else ranking_record(market, user, ranked)
        if wide_check and not user.spec_only:
            # As many checked, named or not; the agreement weighs in on the best five as before.
            ranked_wide = kinds.service_ranking(
                market,
                user,
                vector,
                pave_specs,
                space,
                shot_check_k=wide_check,
                shot_check_k_unnamed=max(wide_check, SHOT_CHECK_K_UNNAMED),
                checks=checks,
                agreement_k=SHOT_CHECK_K,
                found=found,
            )
            wide_rows.append((user, kinds.measure(market, user, ranked_wide)))
            if record is not None:
                record["wide"] = wide_record(market, user, ranked_wide, wide_check)
        if ranking_lines is not None:
            ranking_lines.write(json.dumps(record) + "\n")
            ranking_lines.flush()
        here: dict[str, Any] = {}
        if user.spec_only:  # and as `pavedock task --local` shows it, checked on the user's machine
            ranked_here = kinds.service_ranking(
                market, user, vector, pave_specs, space, checked_here=CLI_TOP_K
            )
            here_metrics = kinds.measure(market, user, ranked_here)
            here_rows.append((replace(user, kind=CHECKED_HERE), here_metrics))
            here = {"checked_here": {**here_metrics, "top1": lws[ranked_here[0].id].key}}
        top = ranked[0]
        kind_users.append(
            {
                "kind": user.kind,
                "task": user.task,
                "seed": user.seed,
                "label_names": list(shots.label_names),
                "top1": lws[top.id].key,
                "top1_label_map": None
                if top.label_map is None
                else top.label_map.names(shots.label_names, lws[top.id].label_names),
                "top1_label_map_how": None if top.label_map is None else top.label_map.how,
                "top1_reason": top.reason(len(shots), shots.label_names, lws[top.id].label_names),
                **metrics,
                **here,
            }
        )
    if ranking_lines is not None:
        ranking_lines.close()
    by_kind = kinds.summarise(kind_rows)
    spec_only_here = kinds.summarise(here_rows).get(CHECKED_HERE) if here_rows else None

    curve = _steps_curve(market, profile, default, pave_specs, names_of) if extras else []
    beyond = _beyond(market, profile, default, pave_specs, rkme_rank) if extras else {}

    summary: dict[str, Any] = {}
    for method, results in by_method.items():
        means = _mean_metrics(results)
        prefix = _prefix(method)
        for key in ("oracle_agreement_at1", "normalized_accuracy", "quality_filter", "hit_at1", "hit_at5"):
            summary[prefix + key] = means[key]
    summary.update(
        {
            "spec_seconds_median": percentile(spec_seconds, 50),
            "spec_seconds_p95": percentile(spec_seconds, 95),
            # Users whose spec was refitted under the learnwares' label sets (none answers by name).
            "realigned_users": len(realign_seconds),
            "realign_sets_median": percentile([float(n) for n, _, _ in realign_seconds], 50)
            if realign_seconds
            else 0.0,
            "realign_seconds_median": percentile([s for _, s, _ in realign_seconds], 50)
            if realign_seconds
            else 0.0,
            "realign_seconds_p95": percentile([s for _, s, _ in realign_seconds], 95)
            if realign_seconds
            else 0.0,
            "realign_sets_max": max((n for n, _, _ in realign_seconds), default=0),
            # Coded users of more than two labels, whose classes were aligned with learnwares by
            # their specs (`with_searched`): the time of the search and refits, and how many.
            "searched_users": sum(1 for *_, k in realign_seconds if k),
            "searched_seconds_median": percentile([s for _, s, k in realign_seconds if k], 50)
            if any(k for *_, k in realign_seconds)
            else 0.0,
            "searched_seconds_p90": percentile([s for _, s, k in realign_seconds if k], 90)
            if any(k for *_, k in realign_seconds)
            else 0.0,
            "search_seconds_median": percentile(search_seconds, 50),
            "spec_floats": space.dim,
            "base_params": space.encoder.num_parameters(),
            "spec_percent_of_base": 100.0 * space.dim / space.encoder.num_parameters(),
            "default_recipe": asdict(default),
        }
    )
    result: dict[str, Any] = {
        "benchmark": "identification",
        "kinds": by_kind,
        "spec_only_checked_here": spec_only_here,
        "wide_check": {"k": wide_check, "kinds": kinds.summarise(wide_rows)} if wide_rows else None,
        "kind_users": kind_users,
        "profile": asdict(profile),
        "market_seed": market_seed,
        "machine": machine(),
        "space_id": space.id,
        "command": f"pavedock bench identify --profile {profile.name} --out {out}"
        + (f" --head {head}" if head else "")
        + ("" if extras else " --no-extras")
        + (f" --market-seed {market_seed}" if market_seed else "")
        + (f" --wide-check {wide_check}" if wide_check else "")
        + "".join(f" --kind {k!r}" for k in only_kinds)
        + "".join(f" --task {t}" for t in only_tasks),
        "summary": summary,
        **{k: summary[k] for k in summary},
        "beyond": beyond,
        "steps_curve": curve,
        "learnwares": [
            {
                "key": lw.key,
                "family": lw.family,
                "variant": lw.variant,
                "format": lw.model_format,
                "test_accuracy": own_acc[lw.key],
                "best_map_test_accuracy": market.best_map_accuracy(lw),
            }
            for lw in lws
        ],
        "refused": market.refused,
        "per_task": _per_task(per_user),
        "per_user": per_user,
        "seconds_total": time.perf_counter() - started,
    }
    write_json(out, result)
    out.with_suffix(".md").write_text(render_markdown(result))
    if curve:
        _plot_curve(curve, out.with_suffix(".png"))
    return result


def _rkme_ranker(market: Market) -> Any:
    """RKME baseline: reduced kernel mean embeddings of frozen-base features, ranked by MMD."""
    from app.ml.encoders import embed_texts
    from app.ml.rkme import fit_rkme, rkme_mmd2

    encoder = market.space.encoder
    rkmes = {}
    with market.space.model.disable_adapter():
        for lw in tqdm(market.learnwares, desc="RKME specs"):
            feats = market.cache.array(
                f"feat-{lw.key}-{len(lw.inputs)}", lambda lw=lw: embed_texts(encoder, lw.inputs).numpy()
            )
            rkmes[lw.id] = fit_rkme(feats, seed=0)

    def rank(texts: list[str], candidates: set[int] | None = None) -> list[Match]:
        user = fit_rkme(embed_texts(encoder, texts).numpy(), seed=0)
        scores = [
            Match(i, -rkme_mmd2(user, r)) for i, r in rkmes.items() if candidates is None or i in candidates
        ]
        return sorted(scores, key=lambda m: -m.score)

    return rank


def _steps_curve(
    market: Market,
    profile: BenchProfile,
    default: FitRecipe,
    default_specs: dict[int, np.ndarray],
    names_of: dict[int, list[str]],
) -> list[dict[str, Any]]:
    """Identification quality and user-spec cost as the number of fitting steps varies, ranked
    by cosine alone and with the label tiers the service applies (`labels_*` keys)."""
    recipes = [("balanced-1grad (default)" if default.steps == 0 else "default", default)]
    recipes += [
        (label, replace(default, steps=steps, balanced=balanced)) for label, steps, balanced in profile.curve
    ]
    points = []
    for label, recipe in recipes:
        specs = (
            default_specs
            if recipe == default
            else {
                lw.id: market.model_spec(lw, recipe)
                for lw in tqdm(market.learnwares, desc=f"curve {label}: model specs")
            }
        )
        metrics, tiered, seconds = [], [], []
        for task, _seed, shots in _users(market, profile.curve_seeds):
            t0 = time.perf_counter()
            user = fit_pave_spec(
                market.space, shots.texts, shots.labels, shots.label_names, kind="task", recipe=recipe
            )
            seconds.append(time.perf_counter() - t0)
            ranking = rank_specs(user.vector, specs)
            metrics.append(_user_metrics(market, task, ranking))
            tiered.append(_user_metrics(market, task, _tiered(ranking, names_of, shots.label_names)))
        points.append(
            {
                "recipe": label,
                "steps": recipe.steps,
                "balanced": recipe.balanced,
                **_mean_metrics(metrics),
                **{f"labels_{key}": value for key, value in _mean_metrics(tiered).items()},
                "user_spec_seconds_median": percentile(seconds, 50),
            }
        )
    return points


def _beyond(
    market: Market,
    profile: BenchProfile,
    recipe: FitRecipe,
    pave_specs: dict[int, np.ndarray],
    rkme_rank: Any,
) -> dict[str, Any]:
    """Table-1-style reuse beyond the original purpose, over the LoRA learnwares."""
    from app.ml.finetune import LoraClassifier, accuracy

    base = market.space.config.base
    adapters = [lw for lw in market.learnwares if lw.model_format == "peft-lora"]
    if not adapters:
        return {}

    def test_set(task: str) -> TextTask:
        return load_task(market.datasets, task, "test", limit=profile.beyond_test_cap)

    def zero_shot(lw: Learnware, task: str) -> float:
        test = test_set(task)
        return market.cache.number(
            f"zs-{lw.key}-on-{task}-{profile.beyond_test_cap}",
            lambda: accuracy(
                LoraClassifier.load(base, lw.package_dir / "adapter").predict_proba(
                    test.texts, test.label_names
                ),
                test.labels,
            ),
        )

    def shot_zero_shot(lw: Learnware, shots: TextTask) -> ShotScore:
        model = LoraClassifier.load(base, lw.package_dir / "adapter")
        probs = model.predict_proba(shots.texts, shots.label_names)
        n = len(shots.label_names)
        return shot_score(probs.argmax(axis=1), probs, shots.labels, LabelMap(tuple(range(n)), "names", n))

    def finetuned(lw: Learnware | None, task: str, shots: TextTask, seed: int) -> float:
        test = test_set(task)
        name = f"ft-{lw.key if lw else 'base'}-on-{task}-s{seed}-{profile.finetune_steps}-{profile.beyond_test_cap}"

        def compute() -> float:
            model = (
                LoraClassifier.new(base, seed=seed)
                if lw is None
                else LoraClassifier.load(base, lw.package_dir / "adapter", trainable=True)
            )
            model.fit(shots.texts, shots.labels, shots.label_names, steps=profile.finetune_steps, seed=seed)
            return accuracy(model.predict_proba(test.texts, test.label_names), test.labels)

        return market.cache.number(name, compute)

    rows = []
    space = market.space
    users = [
        u for u in _users(market, profile.beyond_seeds) if u[0] in (profile.beyond_tasks or market.tasks)
    ]
    for task, seed, shots in tqdm(users, desc="beyond: reuse"):
        candidates = [lw for lw in adapters if lw.task != task]
        if not candidates:
            continue
        ids = {lw.id for lw in candidates}
        user = fit_pave_spec(space, shots.texts, shots.labels, shots.label_names, kind="task", recipe=recipe)
        pave_ranking = rank_specs(user.vector, {i: pave_specs[i] for i in ids})
        pave_top = market.learnwares[pave_ranking[0].id]
        # The shot check on adapters: their label-name heads answer any label set, so each of the
        # top few is scored zero-shot on the user's own examples before one is fine-tuned.
        on_shots = {m.id: shot_zero_shot(market.learnwares[m.id], shots) for m in pave_ranking[:SHOT_CHECK_K]}
        checked_top = market.learnwares[max(on_shots, key=lambda i: on_shots[i].rank_key)]
        rkme_top = market.learnwares[rkme_rank(shots.texts, ids)[0].id]
        zs = {lw.id: zero_shot(lw, task) for lw in candidates}
        oracle = market.learnwares[max(zs, key=lambda i: zs[i])]
        rng = np.random.default_rng(seed)
        random_lw = candidates[int(rng.integers(len(candidates)))]
        scores = {
            "PAVE top-1 (zero-shot)": zs[pave_top.id],
            "PAVE♦ (top-1 fine-tuned)": finetuned(pave_top, task, shots, seed),
            "PAVE♦, top 5 checked on the shots": finetuned(checked_top, task, shots, seed),
            "RKME top-1 fine-tuned": finetuned(rkme_top, task, shots, seed),
            "Random fine-tuned": finetuned(random_lw, task, shots, seed),
            "Random (zero-shot mean)": float(np.mean(list(zs.values()))),
            "Oracle fine-tuned": finetuned(oracle, task, shots, seed),
            "Base fine-tuned": finetuned(None, task, shots, seed),
        }
        rows.append(
            {
                "task": task,
                "seed": seed,
                "pave_top1": pave_top.key,
                "pave_checked_top1": checked_top.key,
                "rkme_top1": rkme_top.key,
                "scores": scores,
            }
        )
    if not rows:
        return {}
    methods = list(rows[0]["scores"])
    ranks = {m: [] for m in methods}  # type: dict[str, list[float]]
    for row in rows:
        order = sorted(methods, key=lambda m: -row["scores"][m])
        for m in methods:
            ranks[m].append(1 + order.index(m))
    return {
        "methods": {
            m: {
                "mean_score": float(np.mean([r["scores"][m] for r in rows])),
                "mean_rank": float(np.mean(ranks[m])),
            }
            for m in methods
        },
        "users": rows,
        "candidate_pool": "LoRA learnwares of the other tasks (good and corrupted)",
    }


def _per_task(per_user: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    tasks: dict[str, dict[str, float]] = {}
    for task in dict.fromkeys(r["task"] for r in per_user):
        rows = [r for r in per_user if r["task"] == task]
        tasks[task] = {
            f"{method}_{key}": float(np.mean([r[method][key] for r in rows]))
            for method in METHODS
            for key in ("oracle_agreement_at1", "normalized_accuracy", "quality_filter", "hit_at1")
        }
    return tasks


def _pm(values: dict[str, float], key: str) -> str:
    mean = values.get(key, float("nan"))
    if mean != mean:  # NaN: the measure does not apply to this kind
        return "–"
    spread = values.get(f"{key}_spread")
    return f"{mean:.3f}" if spread is None else f"{mean:.3f} ± {spread:.3f}"


def _checked_here_lines(here: dict[str, float] | None) -> list[str]:
    """The spec-only users again, as `pavedock task --local` ranks for them (`CHECKED_HERE`)."""
    if not here:
        return []
    return [
        f"Spec-only users as `pavedock task --local` shows them ({int(here['users'])} users; not a "
        f"kind of the mean): the dock's top {CLI_TOP_K} matches checked on the user's own machine "
        "(`DockClient.check_here`), the examples never sent: oracle agreement@1 "
        f"{_pm(here, 'oracle_agreement_at1')}, normalised accuracy {_pm(here, 'normalized_accuracy')}, "
        f"quality filter {_pm(here, 'quality_filter')}.",
        "",
    ]


def _wide_check_lines(result: dict[str, Any]) -> list[str]:
    """Each kind under the service's check beside a wider one (``--wide-check``): the same users,
    spec-only ones left out (the dock checks nothing for them)."""
    wide = result.get("wide_check")
    if not wide:
        return []
    kinds_checked = [k for k in wide["kinds"] if k != "mean over kinds"]
    service = {k: result["kinds"][k] for k in kinds_checked}
    service["mean over kinds"] = {
        key: float(np.nanmean([service[k][key] for k in kinds_checked]))
        for key in ("oracle_agreement_at1", "normalized_accuracy", "quality_filter")
    }
    rows = []
    for kind, v in wide["kinds"].items():
        now = service[kind]
        rows.append(
            [
                kind,
                int(v["users"]),
                f"{_pm(now, 'normalized_accuracy')} → {_pm(v, 'normalized_accuracy')}",
                f"{_pm(now, 'oracle_agreement_at1')} → {_pm(v, 'oracle_agreement_at1')}",
                f"{_pm(now, 'quality_filter')} → {_pm(v, 'quality_filter')}",
            ]
        )
    return [
        f"## A wider check: {wide['k']} candidates for every user (service's check → wider)",
        "",
        f"The same users as above (spec-only users left out: the dock runs nothing for them), with "
        f"{wide['k']} candidates checked on the examples whether or not one answers the user's "
        f"labels by name (the service checks {SHOT_CHECK_K} when one does), the first "
        f"{SHOT_CHECK_K} better than chance weighed by their agreement as the service weighs its "
        "own (`ranking.weighed_by_agreement`); both means over these kinds.",
        "",
        md_table(
            ["kind of user task", "users", "normalised accuracy", "oracle agreement@1", "quality filter"],
            rows,
        ),
        "",
    ]


def render_markdown(result: dict[str, Any]) -> str:
    s = result["summary"]
    lines = [
        f"# Identification benchmark ({result['profile']['name']} profile"
        + (f", market seed {result['market_seed']})" if result.get("market_seed") else ")"),
        "",
        f"Command: `{result['command']}`  ",
        *(
            f"Its {', '.join(r['kinds'])} users rerun ({r['date']}): `{r['command']}`  "
            for r in result.get("reruns", [])
        ),
        f"Machine: {result['machine']['platform']}, {result['machine']['cpus']} CPUs, "
        f"GPU: {result['machine']['gpu'] or 'none'}; torch {result['machine']['torch']}  ",
        f"Date: {result['machine']['date']}; total {result['seconds_total'] / 60:.1f} min; space `{result['space_id']}`",
        "",
        "## As the service ranks, by kind of user task",
        "",
        "Tiers by what a learnware can answer, then the spec's cosine (where no learnware answers "
        "the user's labels by name, with the user's spec refitted under a learnware's own names: "
        "as their meaning maps the user's, for two labels the way round that fits, for codes or "
        "names their meaning does not map of more labels in the alignment with each learnware's "
        "classes that its own spec agrees with most, where that stands above every own cosine), the top "
        f"{SHOT_CHECK_K} distinct candidates ({SHOT_CHECK_K_UNNAMED} where none answers the user's "
        "labels by name) checked on the user's examples under the label "
        "map the dock chooses, ordered by the mean log-probability they give the user's labels, less "
        "the description length of a map the examples chose (`map_cost`); those whose score is no "
        "better than a uniform guess's (log 1 / the label count) after the unchecked ones that "
        "answer by name, in the spec's order (a check no better than a guess is no evidence), and "
        "before the unchecked ones with no label map. Spec-only users (no examples reach the dock): "
        f"the top {SHOT_CHECK_K} distinct candidates that answer their labels by name run on their "
        "pooled declared inputs instead, first by their mean agreement with one another (Cohen's κ). "
        "Mean over users; ± the standard deviation of the "
        "per-seed means over the user seeds; the headline is the mean over kinds.",
        "",
        md_table(
            [
                "kind of user task",
                "users",
                "oracle agreement@1",
                "normalised accuracy",
                "quality filter",
                "hit@1",
            ],
            [
                [
                    kind,
                    int(v["users"]),
                    _pm(v, "oracle_agreement_at1"),
                    _pm(v, "normalized_accuracy"),
                    _pm(v, "quality_filter"),
                    _pm(v, "hit_at1"),
                ]
                for kind, v in result["kinds"].items()
            ],
        ),
        "",
        *_checked_here_lines(result.get("spec_only_checked_here")),
        *_wide_check_lines(result),
        "## Cosine rankings (users who name the classes as the learnwares do; mean over tasks and seeds)",
        "",
        md_table(
            ["method", "oracle agreement@1", "normalised accuracy", "quality filter", "hit@1", "hit@5"],
            [
                [
                    name,
                    s[f"{p}oracle_agreement_at1"],
                    s[f"{p}normalized_accuracy"],
                    s[f"{p}quality_filter"],
                    s[f"{p}hit_at1"],
                    s[f"{p}hit_at5"],
                ]
                for p, name in ((_prefix(method), name) for method, name in METHODS.items())
            ],
        ),
        "",
        f"User spec: median {s['spec_seconds_median']:.3f} s, p95 {s['spec_seconds_p95']:.3f} s; "
        f"spec {s['spec_floats']} floats = {s['spec_percent_of_base']:.3f}% of the base's {s['base_params']:,} parameters; "
        f"search median {1000 * s['search_seconds_median']:.2f} ms."
        + (
            f" Users no learnware answers by name ({s['realigned_users']}, as the service ranks): "
            f"their spec refitted under a median of {s['realign_sets_median']:.0f} learnwares' "
            f"label sets in a median {s['realign_seconds_median']:.3f} s more"
            + (
                f" (p95 {s['realign_seconds_p95']:.3f} s, at most {s['realign_sets_max']} refits)."
                if "realign_seconds_p95" in s
                else "."
            )
            + (
                f" Of them, {s['searched_users']} coded users of more than two labels were aligned "
                "with learnwares by their specs: a median "
                f"{s['searched_seconds_median']:.3f} s (p90 {s['searched_seconds_p90']:.3f} s)."
                if s.get("searched_users")
                else ""
            )
            if s.get("realigned_users")
            else ""
        ),
        "",
        "## Steps versus quality (users of seed(s) "
        + ", ".join(map(str, result["profile"]["curve_seeds"]))
        + ")",
        "",
        md_table(
            [
                "recipe",
                "steps",
                "oracle agreement@1",
                "normalised accuracy",
                "quality filter",
                "hit@1",
                "oracle agreement@1, label tiers",
                "normalised accuracy, label tiers",
                "user spec s (median)",
            ],
            [
                [
                    p["recipe"],
                    p["steps"],
                    p["oracle_agreement_at1"],
                    p["normalized_accuracy"],
                    p["quality_filter"],
                    p["hit_at1"],
                    p.get("labels_oracle_agreement_at1", float("nan")),
                    p.get("labels_normalized_accuracy", float("nan")),
                    p["user_spec_seconds_median"],
                ]
                for p in result["steps_curve"]
            ],
        ),
    ]
    if result["beyond"]:
        lines += [
            "",
            "## Beyond the original purpose (user's own learnwares removed; LoRA learnwares)",
            "",
            md_table(
                ["method", "mean score", "mean rank"],
                [[m, v["mean_score"], v["mean_rank"]] for m, v in result["beyond"]["methods"].items()],
            ),
        ]
    lines += [
        "",
        "## Learnwares (own test accuracy)",
        "",
        md_table(
            ["learnware", "format", "test accuracy", "under its best label map"],
            [
                [lw["key"], lw["format"], lw["test_accuracy"], lw["best_map_test_accuracy"]]
                for lw in result["learnwares"]
            ],
        ),
    ]
    if result.get("refused"):
        lines += [
            "",
            "Trained but left out of the market, as the dock's upload validation would refuse them "
            "(their tasks' users have no quality filter, or no hits, to measure without them):",
            "",
            *(f"- `{r['key']}`: {r['reason']}" for r in result["refused"]),
        ]
    lines += [
        "",
        "## Per task (PAVE)",
        "",
        md_table(
            [
                "task",
                "oracle agreement@1",
                "normalised accuracy",
                "quality filter",
                "PAVE♣ quality filter",
                "RKME normalised accuracy",
            ],
            [
                [
                    t,
                    v["pave_oracle_agreement_at1"],
                    v["pave_normalized_accuracy"],
                    v["pave_quality_filter"],
                    v["pave_club_quality_filter"],
                    v["rkme_normalized_accuracy"],
                ]
                for t, v in result["per_task"].items()
            ],
        ),
        "",
    ]
    return "\n".join(lines)


def _plot_curve(curve: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for key in ("oracle_agreement_at1", "normalized_accuracy", "quality_filter"):
        ax.plot(
            [p["user_spec_seconds_median"] for p in curve], [p[key] for p in curve], marker="o", label=key
        )
    for p in curve:
        ax.annotate(p["recipe"], (p["user_spec_seconds_median"], p["normalized_accuracy"]), fontsize=7)
    ax.set_xscale("log")
    ax.set_xlabel("user spec seconds (median, log)")
    ax.set_ylabel("score")
    ax.set_title("PAVE: fitting cost versus identification quality")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
