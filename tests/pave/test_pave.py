"""PAVE fitting on a tiny base: determinism, what trains, the one-step spec, bad input."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch

from app.ml.encoders import mean_pool
from app.ml.errors import IncompatibleSpec, InvalidInput
from app.ml.pave import PaveSpec, fit_pave_spec, fit_realigned_specs, realignable
from app.ml.spec_space import FitRecipe, SpecSpace
from tests.pave.conftest import LABELS, NAMES, TEXTS


def _frozen_state(space: SpecSpace) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in space.model.named_parameters() if "lora_B" not in n}


@pytest.mark.parametrize("steps", [0, 3])
def test_fitting_is_deterministic(tiny_space: SpecSpace, steps: int) -> None:
    recipe = FitRecipe(steps=steps, batch_size=4)
    a = fit_pave_spec(tiny_space, TEXTS, LABELS, NAMES, kind="task", recipe=recipe)
    b = fit_pave_spec(tiny_space, TEXTS, LABELS, NAMES, kind="task", recipe=recipe)
    assert a.vector.shape == (tiny_space.dim,) and a.vector.dtype == np.float32
    assert np.array_equal(a.vector, b.vector)
    assert a.space_id == tiny_space.id


def test_only_b_trains_and_the_space_is_reset(tiny_space: SpecSpace) -> None:
    before = _frozen_state(tiny_space)
    spec = fit_pave_spec(tiny_space, TEXTS, LABELS, NAMES, kind="task", recipe=FitRecipe(steps=5, lr=1e-2))
    assert np.count_nonzero(spec.vector) > 0.5 * spec.vector.size
    after = _frozen_state(tiny_space)
    assert before.keys() == after.keys()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert all(not b.any() for b in tiny_space.b_params)


def test_one_step_spec_is_the_first_gradient(tiny_space: SpecSpace) -> None:
    """Plain variant: the spec is −∇B of the mean cross-entropy at B = 0."""
    spec = fit_pave_spec(
        tiny_space,
        TEXTS,
        LABELS,
        NAMES,
        kind="task",
        recipe=FitRecipe(steps=0, balanced=False, batch_size=3, head="label-names"),
    )
    tiny_space.reset()
    head = tiny_space.head(tuple(NAMES))
    enc = tiny_space.encoder.tokenizer(TEXTS, padding=True, return_tensors="pt")
    hidden = tiny_space.model(**enc).last_hidden_state
    logits = head.logits(mean_pool(hidden, enc["attention_mask"]))
    torch.nn.functional.cross_entropy(logits, torch.tensor(LABELS)).backward()
    expected = -tiny_space.spec_vector(from_grad=True)
    tiny_space.reset()
    assert np.abs(expected).max() > 1e-3  # a real gradient, not numerical noise
    np.testing.assert_allclose(spec.vector, expected, rtol=1e-4, atol=1e-7)


def test_balanced_one_step_is_a_sign_vector_invariant_to_class_imbalance(tiny_space: SpecSpace) -> None:
    spec = fit_pave_spec(tiny_space, TEXTS, LABELS, NAMES, kind="task")
    assert set(np.unique(spec.vector).tolist()) <= {-1.0, 0.0, 1.0}
    # Repeating one class's examples changes the counts, not the balanced spec.
    texts = TEXTS + TEXTS[:4] * 3
    labels = LABELS + LABELS[:4] * 3
    imbalanced = fit_pave_spec(tiny_space, texts, labels, NAMES, kind="task")
    agree = np.mean(spec.vector == imbalanced.vector)
    assert agree > 0.98


def test_soft_targets_are_accepted(tiny_space: SpecSpace) -> None:
    probs = np.eye(2, dtype=np.float32)[LABELS] * 0.8 + 0.1
    spec = fit_pave_spec(tiny_space, TEXTS, probs, NAMES, kind="model")
    assert spec.meta["soft_targets"] is True and spec.kind == "model"


@pytest.mark.parametrize(
    ("texts", "labels", "names", "message"),
    [
        ([], [], NAMES, "no texts"),
        (TEXTS, [1] * len(TEXTS), NAMES, "single class"),
        (TEXTS, [*LABELS[:-1], 2], NAMES, "label 2 is not among"),
        ([*TEXTS[:-1], "   "], LABELS, NAMES, "text 7 is empty"),
        (TEXTS, LABELS[:-1], NAMES, "7 targets for 8 texts"),
        (TEXTS, LABELS, ["positive"], "at least two label names"),
        (TEXTS, LABELS, ["positive", "positive"], "duplicate"),
        (TEXTS, [0.5] * 8, NAMES, "integer class ids"),
    ],
)
def test_bad_input_is_refused_with_a_reason(
    tiny_space: SpecSpace, texts: list[str], labels: list[int], names: list[str], message: str
) -> None:
    with pytest.raises(InvalidInput, match=message):
        fit_pave_spec(tiny_space, texts, labels, names, kind="task")


def test_long_texts_are_truncated_with_a_warning(
    tiny_space: SpecSpace, caplog: pytest.LogCaptureFixture
) -> None:
    long = " ".join(["good"] * 300)
    with caplog.at_level(logging.WARNING):
        spec = fit_pave_spec(
            tiny_space, [long, *TEXTS[1:]], LABELS, NAMES, kind="task", recipe=FitRecipe(max_tokens=16)
        )
    assert "truncated" in caplog.text
    assert spec.vector.shape == (tiny_space.dim,)


def test_spec_round_trips_through_files(tiny_space: SpecSpace, tmp_path) -> None:  # type: ignore[no-untyped-def]
    spec = fit_pave_spec(tiny_space, TEXTS, LABELS, NAMES, kind="task")
    spec.save(tmp_path / "spec")
    loaded = PaveSpec.load(tmp_path / "spec")
    assert loaded.space_id == spec.space_id and np.array_equal(loaded.vector, spec.vector)
    with pytest.raises(IncompatibleSpec, match="cannot read"):
        PaveSpec.load(tmp_path / "missing")


def test_the_prototype_spec_does_not_depend_on_what_the_classes_are_called(tiny_space: SpecSpace) -> None:
    """Prototype head: other names, codes, or the same classes in another order give the same spec;
    the label-name head (the default) gives another one."""
    protos = FitRecipe(head="prototypes")
    default = fit_pave_spec(tiny_space, TEXTS, LABELS, NAMES, kind="task", recipe=protos)
    codes = fit_pave_spec(
        tiny_space, TEXTS, LABELS, [str(i) for i in range(len(NAMES))], kind="task", recipe=protos
    )
    order = list(range(len(NAMES)))[::-1]
    reordered = fit_pave_spec(
        tiny_space,
        TEXTS,
        [order.index(y) for y in LABELS],
        [NAMES[c] for c in order],
        kind="task",
        recipe=protos,
    )
    assert np.array_equal(default.vector, codes.vector)
    assert np.array_equal(default.vector, reordered.vector)
    by_names = FitRecipe(head="label-names")
    a = fit_pave_spec(tiny_space, TEXTS, LABELS, NAMES, kind="task", recipe=by_names)
    b = fit_pave_spec(
        tiny_space, TEXTS, LABELS, [str(i) for i in range(len(NAMES))], kind="task", recipe=by_names
    )
    assert not np.array_equal(a.vector, b.vector)
    with pytest.raises(InvalidInput, match="head must be one of"):
        FitRecipe(head="centroids")


def test_realigned_specs_are_the_fits_under_those_names(tiny_space: SpecSpace) -> None:
    """One forward pass, one backward pass per name set: each vector is the spec `fit_pave_spec`
    gives the same examples under those names, and the other alignment of two labels is the same
    vector negated (what lets the ranking compare under the best alignment by |cosine|)."""
    sets = [["0", "1"], ["ham", "spam"], ["spam", "ham"], NAMES]
    vectors = fit_realigned_specs(tiny_space, TEXTS, LABELS, sets)
    for names, vector in zip(sets, vectors, strict=True):
        alone = fit_pave_spec(tiny_space, TEXTS, LABELS, names, kind="task").vector
        assert vector.dtype == np.float32 and vector.shape == (tiny_space.dim,)
        assert np.mean(vector == alone) > 0.999, names  # sums in another order: a rare tie may flip
    assert np.mean(vectors[1] == -vectors[2]) > 0.999
    assert np.mean(vectors[0] == vectors[1]) < 0.95  # the names do change the spec
    assert all(not b.any() and b.grad is None for b in tiny_space.b_params)


def test_realigned_specs_refuse_what_they_cannot_do(tiny_space: SpecSpace) -> None:
    with pytest.raises(InvalidInput, match="as many classes"):
        fit_realigned_specs(tiny_space, TEXTS, LABELS, [["a", "b"], ["a", "b", "c"]])
    with pytest.raises(InvalidInput, match="not among"):
        fit_realigned_specs(tiny_space, TEXTS, [0, 1, 2, 0, 1, 0, 1, 0], [["a", "b"]])
    assert fit_realigned_specs(tiny_space, TEXTS, LABELS, []) == []
    assert realignable(FitRecipe(steps=0)) and not realignable(FitRecipe(steps=3))
    assert not realignable(FitRecipe(steps=0, head="prototypes"))


def test_alignment_gains_are_the_spec_agreement_of_each_alignment(tiny_space: SpecSpace) -> None:
    """``A[c, j]`` summed along an alignment is, up to a constant, how much the task's one-gradient
    spec under that alignment agrees with a learnware's spec (before the sign is taken), so the
    assignment that maximises it is the alignment the learnware's spec agrees with most: checked
    here against a refit under every one of the six alignments of three classes."""
    import itertools

    from app.ml.pave import _check_targets, _one_gradient, alignment_gains
    from app.ml.ranking import best_alignment

    labels = [0, 0, 0, 1, 1, 2, 2, 2]
    own = ["great film", "poor service", "sad phone"]  # words the tiny base knows
    truth = (2, 0, 1)  # the task's class c is the learnware's class truth[c]
    learnware = fit_pave_spec(tiny_space, TEXTS, labels, [own[j] for j in truth], kind="task").vector
    (gain,) = alignment_gains(tiny_space, TEXTS, labels, 3, [(learnware, own)])
    assert gain.shape == (3, 3)
    assert best_alignment(gain) == truth
    soft, hard = _check_targets(np.asarray(labels), len(TEXTS), 3)
    alignments = list(itertools.permutations(range(3)))
    heads = [tiny_space.head(tuple(own[j] for j in a)).logits for a in alignments]
    grads = _one_gradient(tiny_space, TEXTS, soft, hard, heads, tiny_space.config.recipe, None)
    agreement = [float(learnware @ -g) for g in grads]
    predicted = [sum(gain[c, a[c]] for c in range(3)) for a in alignments]
    assert np.corrcoef(agreement, predicted)[0, 1] > 0.99
    assert all(not b.any() for b in tiny_space.b_params)


def test_alignment_gains_refuse_bad_input(tiny_space: SpecSpace) -> None:
    from app.ml.pave import alignment_gains

    with pytest.raises(InvalidInput, match="not among"):
        alignment_gains(tiny_space, TEXTS, [0, 1, 2, 0, 1, 0, 1, 0], 2, [])
    with pytest.raises(IncompatibleSpec):
        alignment_gains(tiny_space, TEXTS, LABELS, 2, [(np.ones(3, dtype=np.float32), NAMES)])
    assert alignment_gains(tiny_space, TEXTS, LABELS, 2, []) == []
    assert all(not b.any() for b in tiny_space.b_params)
