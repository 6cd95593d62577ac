"""UTD: move a task to another base through its universal task descriptor, in closed form.

For an encoder f compared with frozen prompt embeddings g (the label-name head: prompts are
the class names), unlabelled probes x_i and prompts p_j give the descriptor

    U_ij = ⟨f_ft(x_i), g(p_j)⟩ − ⟨f_pre(x_i), g(p_j)⟩     (unit vectors),

a probes × prompts matrix whatever the model's width. On the target, with F the unit
features of the probes and G the unit prompt embeddings, the operator

    X* = argmin ‖F X Gᵀ − U‖² + μ_G‖F X‖² + μ_F‖X Gᵀ‖² + μ_F μ_G‖X‖²

satisfies (FᵀF + μ_F I) X (GᵀG + μ_G I) = Fᵀ U G; with F = P S Qᵀ and G = K T Lᵀ,
X* = Q diag(s/(s²+μ_F)) Pᵀ U K diag(t/(t²+μ_G)) Lᵀ, μ_F = 1e-2·mean(s²), μ_G = 1e-6·mean(t²),
in float64. It is deployed after pooling: emb ← (I + α Xᵀ)·emb, so f'ᵀg = fᵀg + α fᵀXg.
Operators of several tasks add; a negative α removes a task.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from app.ml.errors import InvalidInput

DEFAULT_ALPHA = 0.5
MU_F_REL = 1e-2
MU_G_REL = 1e-6


def task_descriptor(f_ft: torch.Tensor, f_pre: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """U = f̂_ft ĝᵀ − f̂_pre ĝᵀ (probes × prompts), rows normalised to unit length, float64."""
    if f_ft.shape != f_pre.shape:
        raise InvalidInput(
            f"fine-tuned features {tuple(f_ft.shape)} and base features {tuple(f_pre.shape)} differ"
        )
    if f_ft.shape[1] != g.shape[1]:
        raise InvalidInput(f"features of width {f_ft.shape[1]} and prompts of width {g.shape[1]}")
    g_hat = F.normalize(g.double(), dim=-1)
    return (F.normalize(f_ft.double(), dim=-1) - F.normalize(f_pre.double(), dim=-1)) @ g_hat.T


def solve_operator(
    f_pre: torch.Tensor,
    g: torch.Tensor,
    descriptor: torch.Tensor,
    *,
    mu_f_rel: float = MU_F_REL,
    mu_g_rel: float = MU_G_REL,
) -> torch.Tensor:
    """The closed-form X* (d × d, float64) that makes F X Gᵀ reproduce ``descriptor``."""
    if descriptor.shape != (f_pre.shape[0], g.shape[0]):
        raise InvalidInput(
            f"descriptor has shape {tuple(descriptor.shape)}, needs (probes, prompts) = "
            f"({f_pre.shape[0]}, {g.shape[0]})"
        )
    if f_pre.shape[1] != g.shape[1]:
        raise InvalidInput(f"probe features of width {f_pre.shape[1]} and prompts of width {g.shape[1]}")
    if mu_f_rel < 0 or mu_g_rel < 0:
        raise InvalidInput(f"regularisers must be >= 0, got {mu_f_rel} and {mu_g_rel}")
    f_hat = F.normalize(f_pre.double(), dim=-1)
    g_hat = F.normalize(g.double(), dim=-1)
    p, s, qh = torch.linalg.svd(f_hat, full_matrices=False)
    k, t, lh = torch.linalg.svd(g_hat, full_matrices=False)
    mu_f = mu_f_rel * float(s.pow(2).mean())
    mu_g = mu_g_rel * float(t.pow(2).mean())
    left = _shrink(s, mu_f)
    right = _shrink(t, mu_g)
    core = left[:, None] * (p.T @ descriptor.double() @ k) * right[None, :]
    return qh.T @ core @ lh


def _shrink(s: torch.Tensor, mu: float) -> torch.Tensor:
    """s / (s² + μ), with exact zeros where s and μ both vanish."""
    denom = s.pow(2) + mu
    return torch.where(denom > 0, s / denom.clamp(min=torch.finfo(s.dtype).tiny), torch.zeros_like(s))


@dataclass(frozen=True)
class UTDOperator:
    """A post-pooling edit emb ← emb + α·emb·X of a target base (rows are embeddings)."""

    matrix: torch.Tensor
    alpha: float = DEFAULT_ALPHA

    def __post_init__(self) -> None:
        if self.matrix.ndim != 2 or self.matrix.shape[0] != self.matrix.shape[1]:
            raise InvalidInput(f"a UTD operator is a square matrix, got shape {tuple(self.matrix.shape)}")

    @property
    def dim(self) -> int:
        return int(self.matrix.shape[0])

    def effective(self) -> torch.Tensor:
        """α·X: what gets added to the identity."""
        return self.alpha * self.matrix.double()

    def apply(self, embeddings: torch.Tensor) -> torch.Tensor:
        """(I + α Xᵀ)·emb on unit-normalised pooled embeddings (the head is a cosine anyway)."""
        if embeddings.shape[-1] != self.dim:
            raise InvalidInput(f"embeddings of width {embeddings.shape[-1]}, operator of width {self.dim}")
        e = F.normalize(embeddings.double(), dim=-1)
        return (e + e @ self.effective()).to(embeddings.dtype)

    def negated(self) -> UTDOperator:
        """The same operator with −α: removes the task instead of adding it."""
        return UTDOperator(self.matrix, -self.alpha)

    def scaled(self, alpha: float) -> UTDOperator:
        return UTDOperator(self.matrix, alpha)


def combine_operators(operators: Iterable[UTDOperator]) -> UTDOperator:
    """Σ_k α_k X_k as one operator with α = 1 (task addition and negation compose by sum)."""
    ops = list(operators)
    if not ops:
        raise InvalidInput("no operators to combine")
    dims = {op.dim for op in ops}
    if len(dims) != 1:
        raise InvalidInput(f"operators of different widths: {sorted(dims)}")
    return UTDOperator(torch.stack([op.effective() for op in ops]).sum(dim=0), 1.0)


def operator_from_features(
    source_ft: torch.Tensor,
    source_pre: torch.Tensor,
    source_prompts: torch.Tensor,
    target_pre: torch.Tensor,
    target_prompts: torch.Tensor,
    *,
    alpha: float = DEFAULT_ALPHA,
    mu_f_rel: float = MU_F_REL,
    mu_g_rel: float = MU_G_REL,
) -> tuple[UTDOperator, torch.Tensor]:
    """Descriptor on the source, operator on the target; returns the operator and the descriptor."""
    if source_ft.shape[0] != target_pre.shape[0]:
        raise InvalidInput(f"{source_ft.shape[0]} source probes but {target_pre.shape[0]} target probes")
    if source_prompts.shape[0] != target_prompts.shape[0]:
        raise InvalidInput(
            f"{source_prompts.shape[0]} source prompts but {target_prompts.shape[0]} target prompts"
        )
    u = task_descriptor(source_ft, source_pre, source_prompts)
    x = solve_operator(target_pre, target_prompts, u, mu_f_rel=mu_f_rel, mu_g_rel=mu_g_rel)
    return UTDOperator(x.float(), alpha), u
