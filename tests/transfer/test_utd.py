"""The UTD closed form: descriptor, operator, addition and negation."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from app.ml.encoders import embed_texts, load_encoder
from app.ml.errors import InvalidInput
from app.ml.head import LabelNameHead
from app.ml.transfer import learnware_features, load_utd_operator, transfer_learnware
from app.ml.transfer.taskvec import load_lora_task_vector
from app.ml.transfer.utd import UTDOperator, combine_operators, solve_operator, task_descriptor
from tests.fixtures.tiny_bases import LABEL_NAMES, TinyBases


def _grid(probes: int, prompts: int, dim: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    f = F.normalize(torch.randn(probes, dim, generator=gen, dtype=torch.float64), dim=-1)
    g = F.normalize(torch.randn(prompts, dim, generator=gen, dtype=torch.float64), dim=-1)
    u = 0.1 * torch.randn(probes, prompts, generator=gen, dtype=torch.float64)
    return f, g, u


def test_operator_reproduces_the_descriptor_on_its_probes() -> None:
    f, g, u = _grid(probes=20, prompts=5, dim=64, seed=0)
    exact = solve_operator(f, g, u, mu_f_rel=0.0, mu_g_rel=0.0)
    torch.testing.assert_close(f @ exact @ g.T, u, atol=1e-9, rtol=0)
    x = solve_operator(f, g, u)
    rel = float((f @ x @ g.T - u).norm() / u.norm())
    assert rel < 0.05  # μ_F = 1e-2·mean(s²) shrinks each direction by s²/(s²+μ_F)
    assert float((x - exact).norm() / exact.norm()) < 0.05


def test_operator_solves_the_regularised_normal_equations() -> None:
    f, g, u = _grid(probes=12, prompts=4, dim=16, seed=1)
    x = solve_operator(f, g, u, mu_f_rel=0.3, mu_g_rel=0.2)
    s, t = torch.linalg.svdvals(f), torch.linalg.svdvals(g)
    mu_f, mu_g = 0.3 * float(s.pow(2).mean()), 0.2 * float(t.pow(2).mean())
    eye = torch.eye(16, dtype=torch.float64)
    lhs = (f.T @ f + mu_f * eye) @ x @ (g.T @ g + mu_g * eye)
    torch.testing.assert_close(lhs, f.T @ u @ g, atol=1e-10, rtol=1e-8)


def test_deployed_operator_moves_affinities_by_alpha_times_the_descriptor() -> None:
    f, g, u = _grid(probes=10, prompts=3, dim=32, seed=2)
    op = UTDOperator(solve_operator(f, g, u, mu_f_rel=0.0, mu_g_rel=0.0), alpha=0.5)
    edited = op.apply(f)
    torch.testing.assert_close(edited @ g.T - f @ g.T, 0.5 * u, atol=1e-9, rtol=0)


def test_negation_and_addition() -> None:
    f, g, u = _grid(probes=10, prompts=3, dim=32, seed=3)
    op = UTDOperator(solve_operator(f, g, u), alpha=0.5)
    neg = op.negated()
    assert neg.alpha == -0.5
    torch.testing.assert_close(neg.apply(f) @ g.T - f @ g.T, -(op.apply(f) @ g.T - f @ g.T))
    cancelled = combine_operators([op, neg])
    torch.testing.assert_close(cancelled.apply(f), f)
    other = UTDOperator(solve_operator(f, g, -2 * u), alpha=0.5)
    both = combine_operators([op, other])
    torch.testing.assert_close(
        both.apply(f) @ g.T - f @ g.T, -(op.apply(f) @ g.T - f @ g.T), atol=1e-9, rtol=1e-6
    )
    with pytest.raises(InvalidInput, match="different widths"):
        combine_operators([op, UTDOperator(torch.zeros(8, 8))])


def test_descriptor_is_zero_for_an_unchanged_model() -> None:
    f, g, _ = _grid(probes=6, prompts=3, dim=8, seed=4)
    assert float(task_descriptor(3 * f, f, g).abs().max()) < 1e-12
    with pytest.raises(InvalidInput, match="width"):
        task_descriptor(f, f, torch.ones(3, 9))


def test_utd_transfer_between_tiny_bases(tiny: TinyBases, tmp_path: Path) -> None:
    result = transfer_learnware(
        "utd", tiny.adapter, tiny.bert, tiny.mpnet, tiny.texts, None, LABEL_NAMES, {"mu_f_rel": 0.0}
    )
    assert result.kind == "operator" and result.operator is not None
    op = result.operator
    assert op.dim == 48 and op.alpha == 0.5
    assert result.stats["probes"] == len(tiny.texts) and result.stats["prompts"] == 2
    target = load_encoder(tiny.mpnet)
    f = F.normalize(embed_texts(target, tiny.texts).double(), dim=-1)
    g = LabelNameHead.from_names(target, LABEL_NAMES).embeddings.double()
    moved = (op.apply(f) @ g.T - f @ g.T) / op.alpha
    # the target's affinity change on the probes is the source learnware's descriptor
    source = load_encoder(tiny.bert)
    tv = load_lora_task_vector(tiny.adapter, "bert")
    f_ft = learnware_features(load_encoder(tiny.bert, fresh=True), tv, tiny.texts)
    u = task_descriptor(
        f_ft, embed_texts(source, tiny.texts), LabelNameHead.from_names(source, LABEL_NAMES).embeddings
    )
    torch.testing.assert_close(moved, u, atol=2e-4, rtol=1e-3)
    out = result.save(tmp_path / "utd")
    loaded = load_utd_operator(out)
    assert loaded.alpha == 0.5
    torch.testing.assert_close(loaded.matrix, op.matrix)
