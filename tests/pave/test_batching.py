"""How texts are batched for the base: every text once, within the memory budget, at the least cost,
and results that do not depend on the split."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from app.ml.encoders import plan_batches, run_batches, side_by_side, token_batches
from app.ml.pave import fit_pave_spec
from app.ml.spec_space import FitRecipe, SpecSpace


def _cost(lengths: list[int], batches: list[list[int]], overhead: int) -> int:
    return sum(len(b) * max(lengths[i] for i in b) + overhead for b in batches)


def _best_by_brute_force(lengths: list[int], budget: int, overhead: int) -> int:
    """The least cost over every split of the sorted texts into runs of neighbours."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    best = None
    for cuts in itertools.product([False, True], repeat=len(order) - 1):
        batches, current = [], [order[0]]
        for cut, i in zip(cuts, order[1:], strict=True):
            if cut:
                batches.append(current)
                current = []
            current.append(i)
        batches.append(current)
        if any(len(b) > 1 and len(b) * max(lengths[i] for i in b) > budget for b in batches):
            continue
        cost = _cost(lengths, batches, overhead)
        best = cost if best is None else min(best, cost)
    assert best is not None
    return best


@pytest.mark.parametrize("seed", range(12))
def test_the_plan_covers_every_text_once_within_the_budget_at_the_least_cost(seed: int) -> None:
    rng = np.random.default_rng(seed)
    lengths = [int(n) for n in rng.integers(3, 60, size=int(rng.integers(1, 11)))]
    budget, overhead = int(rng.choice([64, 128, 512])), int(rng.choice([0, 16, 128]))
    batches = plan_batches(lengths, token_budget=budget, overhead=overhead)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    for batch in batches:
        assert len(batch) == 1 or len(batch) * max(lengths[i] for i in batch) <= budget
    flat = [lengths[i] for b in batches for i in b]
    assert flat == sorted(flat)
    assert _cost(lengths, batches, overhead) == _best_by_brute_force(lengths, budget, overhead)


def test_one_long_text_does_not_pad_the_short_ones() -> None:
    lengths = [10] * 15 + [120]
    batches = plan_batches(lengths, token_budget=16 * 128, overhead=128)
    assert [len(b) for b in batches] == [15, 1]
    # With batches costing nothing but their padding, every text of one length is one batch.
    assert plan_batches([5, 9, 5, 9], token_budget=1000, overhead=0) == [[0, 2], [1, 3]]


def test_a_text_longer_than_the_budget_is_a_batch_alone() -> None:
    assert plan_batches([200, 3, 3], token_budget=100, overhead=10) == [[1, 2], [0]]
    assert plan_batches([], token_budget=100) == []


def test_token_batches_pad_each_batch_to_its_longest_text(tiny_space: SpecSpace) -> None:
    tokenizer = tiny_space.encoder.tokenizer
    texts = ["good"] * 12 + ["good movie " * 20]
    batches = list(token_batches(tokenizer, texts, batch_size=4, max_tokens=32, device=torch.device("cpu")))
    assert sorted(i for b in batches for i in b.indices) == list(range(len(texts)))
    long_batch = next(b for b in batches if 12 in b.indices)
    assert long_batch.indices == [12]  # truncated to 32 tokens, and alone: the short ones pad to 3
    assert long_batch.inputs["input_ids"].shape == (1, 32)
    assert all(b.inputs["input_ids"].shape[1] <= 3 for b in batches if b is not long_batch)


def test_the_spec_does_not_depend_on_how_its_texts_are_batched(tiny_space: SpecSpace) -> None:
    texts = [" ".join(["good movie"] * (1 + i % 7)) for i in range(24)]
    labels = [i % 3 for i in range(24)]
    names = ["neg", "neu", "pos"]
    wide = fit_pave_spec(tiny_space, texts, labels, names, kind="task", recipe=FitRecipe(batch_size=64))
    narrow = fit_pave_spec(tiny_space, texts, labels, names, kind="task", recipe=FitRecipe(batch_size=1))
    assert float(np.mean(wide.vector == narrow.vector)) > 0.999


def test_side_by_side_keeps_the_order_and_restores_the_thread_count() -> None:
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        seen: list[int] = []

        def square(x: int) -> int:
            seen.append(torch.get_num_threads())
            return x * x

        assert list(side_by_side(square, list(range(8)), torch.device("cpu"))) == [x * x for x in range(8)]
        assert seen == [1] * 8  # each item on one thread, not split over both
        assert torch.get_num_threads() == 2

        def fails(x: int) -> int:
            if x == 3:
                raise ValueError("item 3")
            return x

        with pytest.raises(ValueError, match="item 3"):
            list(side_by_side(fails, list(range(6)), torch.device("cpu")))
        assert torch.get_num_threads() == 2
        torch.set_num_threads(1)  # one thread: the items run in turn, on the caller's thread
        assert list(side_by_side(square, [1, 2], torch.device("cpu"))) == [1, 4]
    finally:
        torch.set_num_threads(before)


def test_the_spec_is_the_same_fitted_side_by_side_or_in_turn(tiny_space: SpecSpace) -> None:
    texts = [" ".join(["good movie"] * (1 + i % 9)) for i in range(40)]
    labels = [i % 2 for i in range(40)]
    recipe = FitRecipe(batch_size=4)  # several batches
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        in_turn = fit_pave_spec(tiny_space, texts, labels, ["neg", "pos"], kind="task", recipe=recipe)
        torch.set_num_threads(2)
        both = fit_pave_spec(tiny_space, texts, labels, ["neg", "pos"], kind="task", recipe=recipe)
    finally:
        torch.set_num_threads(before)
    assert float(np.mean(in_turn.vector == both.vector)) > 0.999


def test_run_batches_hands_out_the_largest_first(tiny_space: SpecSpace) -> None:
    texts = ["good"] * 6 + ["good movie " * 10] * 2
    batches = list(
        token_batches(
            tiny_space.encoder.tokenizer, texts, batch_size=2, max_tokens=32, device=torch.device("cpu")
        )
    )
    pairs = list(run_batches(lambda b: len(b.indices), batches, torch.device("cpu")))
    sizes = [b.inputs["input_ids"].numel() for b, _ in pairs]
    assert sizes == sorted(sizes, reverse=True)
    assert sorted(i for b, _ in pairs for i in b.indices) == list(range(len(texts)))
    assert all(n == len(b.indices) for b, n in pairs)
