"""The Gram path for tall and wide matrices gives the same merges as LAPACK's SVD."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor

from app.ml.merging import linalg
from app.ml.merging.pact import PactConfig, pact_filter, pact_shields
from app.ml.merging.registry import get_method, merge_delta


@pytest.fixture
def gram_everywhere(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every tall or wide matrix takes the Gram path, in row blocks of 7 (so blocks have a remainder)."""
    monkeypatch.setattr(linalg, "GRAM_MIN_ELEMENTS", 0)
    monkeypatch.setattr(linalg, "CHUNK_ROWS", 7)


def _taus(shape: tuple[int, int], count: int, rank: int | None, seed: int = 0) -> list[Tensor]:
    generator = torch.Generator().manual_seed(seed)
    if rank is None:
        return [torch.randn(*shape, generator=generator) for _ in range(count)]
    return [
        torch.randn(shape[0], rank, generator=generator) @ torch.randn(rank, shape[1], generator=generator)
        for _ in range(count)
    ]


def _merge(method: str, taus: list[Tensor], base: Tensor, params: dict[str, object]) -> Tensor:
    spec = get_method(method)
    return merge_delta("encoder.weight", base, taus, spec, spec.resolve(params))


def _relative(a: Tensor, b: Tensor) -> float:
    return float(torch.linalg.norm(a - b) / torch.linalg.norm(b))


SHAPES = [(120, 12), (12, 120)]
CASES = [
    ("tsv_m", {"alpha": 1.0}),
    ("iso_c", {"alpha": 1.0}),
    ("iso_cts", {"alpha": 1.0, "common_fraction": 0.5}),
    ("iso_c", {"alpha": 1.0, "pact": True, "pact_svd": "exact", "pact_anchor_rank": 0.2}),
    ("tsv_m", {"alpha": 1.0, "pact": True, "pact_svd": "exact", "pact_side": "left"}),
]


@pytest.mark.parametrize("shape", SHAPES, ids=["tall", "wide"])
@pytest.mark.parametrize("rank", [None, 2], ids=["full-rank", "rank-2"])
@pytest.mark.parametrize(("method", "params"), CASES, ids=[f"{m}-{i}" for i, (m, _) in enumerate(CASES)])
def test_gram_path_equals_lapack(
    monkeypatch: pytest.MonkeyPatch,
    shape: tuple[int, int],
    rank: int | None,
    method: str,
    params: dict[str, object],
) -> None:
    taus = _taus(shape, 3, rank)
    base = torch.randn(*shape, generator=torch.Generator().manual_seed(9))
    expected = _merge(method, taus, base, params)
    monkeypatch.setattr(linalg, "GRAM_MIN_ELEMENTS", 0)
    monkeypatch.setattr(linalg, "CHUNK_ROWS", 7)
    assert linalg.gram_orientation(torch.Size(shape)) is not None
    actual = _merge(method, taus, base, params)
    assert actual.dtype == torch.float32 and actual.shape == expected.shape
    assert _relative(actual, expected) < 1e-5


@pytest.mark.usefixtures("gram_everywhere")
@pytest.mark.parametrize("shape", SHAPES, ids=["tall", "wide"])
def test_svd_top_matches_lapack_up_to_sign(shape: tuple[int, int]) -> None:
    (matrix,) = _taus(shape, 1, rank=5, seed=3)
    left, values, right = linalg.svd_top(matrix, k=4)
    u, s, vh = torch.linalg.svd(matrix.double(), full_matrices=False)
    assert values.shape == (4,) and left.shape == (shape[0], 4) and right.shape == (shape[1], 4)
    torch.testing.assert_close(values, s[:4], rtol=1e-9, atol=0)
    signs = torch.sign((left.double() * u[:, :4]).sum(0))
    torch.testing.assert_close(left.double() * signs, u[:, :4], rtol=0, atol=1e-6)
    torch.testing.assert_close(right.double() * signs, vh[:4].T, rtol=0, atol=1e-6)
    # The rank cut: a rank-5 matrix gives 5 triplets however many are asked for.
    assert linalg.svd_top(matrix)[1].numel() == 5


@pytest.mark.usefixtures("gram_everywhere")
def test_duplicated_task_vectors_merge_without_null_space_noise() -> None:
    """The same learnware twice: stacked singular vectors are exactly dependent, and the Gram
    path's polar factor drops the dependent directions instead of dividing by rounding noise."""
    (tau,) = _taus((120, 12), 1, rank=3, seed=5)
    merged = _merge("tsv_m", [tau, tau.clone()], torch.zeros(120, 12), {"alpha": 1.0})
    assert torch.isfinite(merged).all()
    values = torch.linalg.svdvals(merged.double())
    assert int((values > 1e-4 * values[0]).sum()) == 3  # the rest is float32 rounding of the output


@pytest.mark.usefixtures("gram_everywhere")
def test_pact_filter_on_the_gram_path_is_orthogonal_to_the_shield() -> None:
    taus = _taus((120, 12), 3, rank=None, seed=7)
    base = torch.randn(120, 12, generator=torch.Generator().manual_seed(8))
    spec = get_method("iso_c")
    config = PactConfig.from_params(spec.resolve({"pact": True, "pact_anchor_rank": 0.25}))
    assert config is not None
    filtered = pact_filter("w", base, taus, config)
    for t, shield in enumerate(pact_shields("w", base, taus, config)):
        assert shield.shape[1] > 0
        assert float(torch.linalg.norm(filtered[t].double() @ shield)) < 1e-5 * float(
            torch.linalg.norm(taus[t])
        )


def test_ties_in_row_blocks_equals_ties_in_one_piece(monkeypatch: pytest.MonkeyPatch) -> None:
    """TIES trims and sums block by block; blocks (with a remainder), transposed (non-contiguous)
    inputs and 1-D tensors give the same merge as one block."""
    taus = _taus((23, 11), 3, rank=None, seed=11)
    transposed = [tau.T.contiguous().T for tau in taus]  # same values, column-major strides
    biases = [tau[0] for tau in taus]
    whole = [_merge("ties", xs, torch.zeros_like(xs[0]), {"k": 0.3, "lam": 1.0}) for xs in (taus, biases)]
    monkeypatch.setattr(linalg, "CHUNK_ROWS", 4)
    assert not transposed[0].is_contiguous()
    for xs, expected in ((taus, whole[0]), (transposed, whole[0]), (biases, whole[1])):
        torch.testing.assert_close(
            _merge("ties", xs, torch.zeros_like(xs[0]), {"k": 0.3, "lam": 1.0}), expected
        )
