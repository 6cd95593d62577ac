"""The low-rank fast path equals the dense path (to 1e-5 relative) and keeps results low-rank."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor

from app.ml.errors import InvalidInput
from app.ml.merging import LoraDelta, dense_update, factor_svd, get_method, merge_lora
from app.ml.merging.registry import merge_delta

NAME = "encoder.layer.0.attention.self.query.weight"


def _relative_error(actual: Tensor, expected: Tensor) -> float:
    return float(
        torch.linalg.norm(actual.double() - expected.double()) / torch.linalg.norm(expected.double())
    )


def _dense_merge(method: str, params: dict[str, object], base: Tensor, taus: list[Tensor]) -> Tensor:
    spec = get_method(method)
    return merge_delta(NAME, base, taus, spec, spec.resolve(params))


def test_factor_svd_is_the_svd_of_the_sum(lora_deltas: list[LoraDelta]) -> None:
    total = torch.zeros(24, 20, dtype=torch.float64)
    for delta in lora_deltas:
        total += delta.scale * delta.B.double() @ delta.A.double()
    left, values, right = factor_svd(lora_deltas)
    assert values.numel() == sum(delta.rank for delta in lora_deltas)
    assert _relative_error(left @ torch.diag(values) @ right.T, total) < 1e-10
    assert torch.allclose(values, torch.linalg.svdvals(total)[: values.numel()], rtol=1e-8)
    assert torch.allclose(left.T @ left, torch.eye(values.numel(), dtype=torch.float64), atol=1e-10)


CASES = [
    ("task_arithmetic", {"lam": 0.7}),
    ("tsv_m", {"alpha": 1.1}),
    ("iso_c", {"alpha": 1.4}),
    ("iso_cts", {"alpha": 0.9}),
    ("iso_cts", {"alpha": 0.9, "common_fraction": 0.5}),
    ("ties", {"k": 0.3, "lam": 1.0}),
    ("dare", {"p": 0.3, "lam": 0.5, "seed": 5}),
]
PACT = {"pact": True, "pact_svd": "exact", "pact_anchor_rank": 0.1, "pact_task_rank": 0.1}


@pytest.mark.parametrize(("method", "params"), CASES)
@pytest.mark.parametrize("pact_side", [None, "right", "left"])
def test_low_rank_path_equals_dense_path(
    method: str,
    params: dict[str, object],
    pact_side: str | None,
    lora_deltas: list[LoraDelta],
    base_weight: Tensor,
) -> None:
    full = {**params, **(PACT | {"pact_side": pact_side} if pact_side else {})}
    learnwares = [{NAME: delta} for delta in lora_deltas]
    lowrank = merge_lora(learnwares, method, full, base_weights={NAME: base_weight})[NAME]
    dense = _dense_merge(method, full, base_weight, [delta.dense() for delta in lora_deltas])
    assert _relative_error(dense_update(lowrank), dense) < 1e-5


@pytest.mark.parametrize("method", ["task_arithmetic", "tsv_m", "iso_c", "iso_cts"])
def test_low_rank_methods_return_factors_of_rank_at_most_sum_r(
    method: str, lora_deltas: list[LoraDelta]
) -> None:
    merged = merge_lora([{NAME: delta} for delta in lora_deltas], method)[NAME]
    assert isinstance(merged, LoraDelta)
    assert merged.shape == (24, 20)
    assert merged.rank <= sum(delta.rank for delta in lora_deltas)
    assert isinstance(merge_lora([{NAME: delta} for delta in lora_deltas], method, dense=True)[NAME], Tensor)


@pytest.mark.parametrize("method", ["task_arithmetic", "tsv_m", "iso_c", "iso_cts", "ties"])
def test_learnwares_without_a_weight_count_as_zero_updates(
    method: str, lora_deltas: list[LoraDelta], base_weight: Tensor, generator: torch.Generator
) -> None:
    other = "encoder.layer.0.attention.self.value.weight"
    extra = LoraDelta(B=torch.randn(24, 2, generator=generator), A=torch.randn(2, 20, generator=generator))
    learnwares = [{NAME: lora_deltas[0], other: extra}, {NAME: lora_deltas[1]}, {NAME: lora_deltas[2]}]
    params = {"pact": True, "pact_svd": "exact"}
    merged = merge_lora(
        learnwares, method, params, base_weights={NAME: base_weight, other: base_weight}, dense=True
    )
    dense = _dense_merge(
        method, params, base_weight, [extra.dense(), torch.zeros(24, 20), torch.zeros(24, 20)]
    )
    assert _relative_error(dense_update(merged[other]), dense) < 1e-5


def test_tuples_are_accepted_as_factors(lora_deltas: list[LoraDelta]) -> None:
    as_tuples = [{NAME: (delta.B, delta.A, delta.scale)} for delta in lora_deltas]
    a = merge_lora(as_tuples, "iso_c", dense=True)[NAME]
    b = merge_lora([{NAME: delta} for delta in lora_deltas], "iso_c", dense=True)[NAME]
    assert torch.equal(dense_update(a), dense_update(b))


def test_bad_factor_shapes_are_named() -> None:
    with pytest.raises(InvalidInput, match=r"B \(5, 3\) and A \(2, 4\)"):
        LoraDelta(B=torch.zeros(5, 3), A=torch.zeros(2, 4))


def test_mismatched_learnwares_are_named(lora_deltas: list[LoraDelta]) -> None:
    wrong = LoraDelta(B=torch.zeros(10, 3), A=torch.zeros(3, 20))
    with pytest.raises(InvalidInput, match=r"learnware 1 has a 10×20 update but another has 24×20"):
        merge_lora([{NAME: lora_deltas[0]}, {NAME: wrong}], "iso_c")


def test_pact_without_base_weights_is_refused(lora_deltas: list[LoraDelta]) -> None:
    with pytest.raises(InvalidInput, match="PACT needs the base weights"):
        merge_lora([{NAME: delta} for delta in lora_deltas], "iso_c", {"pact": True})


def test_pact_base_weight_of_the_wrong_shape_is_named(lora_deltas: list[LoraDelta]) -> None:
    with pytest.raises(InvalidInput, match=r"24×20 but the base weight has shape \(20, 24\)"):
        merge_lora(
            [{NAME: delta} for delta in lora_deltas],
            "iso_c",
            {"pact": True},
            base_weights={NAME: torch.zeros(20, 24)},
        )


@pytest.mark.parametrize("method", ["tsv_m", "iso_c", "iso_cts"])
def test_the_same_learnware_twice_merges_the_same_on_both_paths(
    method: str, lora_deltas: list[LoraDelta], base_weight: Tensor
) -> None:
    """Duplicated tasks give exactly dependent singular vectors; both paths must still agree."""
    twice = [lora_deltas[0], lora_deltas[1], lora_deltas[0]]
    lowrank = merge_lora([{NAME: delta} for delta in twice], method)[NAME]
    dense = _dense_merge(method, {}, base_weight, [delta.dense() for delta in twice])
    assert _relative_error(dense_update(lowrank), dense) < 1e-5
