"""The ``pooled-linear`` model: a registered base, mean pooling, one d × d linear map, the
label-name head.

    logits_c = cos(W · meanpool(f(x)), e_c) / T,    e_c = meanpool(f(name_c))  (frozen base)

It is what a UTD transfer yields. The UTD operator is deployed after pooling as
emb ← (I + α Xᵀ)·emb on the unit embedding; the head is a cosine, so the unit scaling before the
map changes no logit, and the operator *is* the linear map W = I + α Xᵀ (float64, then stored
as float32). The file holds ``weight`` alone, in ``torch.nn.Linear``'s convention (out × in,
y = W x), so ``nn.Linear(d, d, bias=False)`` loads it as it is.

The header checks here import no torch (the API checks uploads with them); reading the weight
and folding an operator do.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from app.ml.errors import InvalidPackage
from app.ml.safetensors_header import read_safetensors_header

if TYPE_CHECKING:
    import torch

    from app.ml.transfer.utd import UTDOperator

LINEAR_DIR = "linear"
LINEAR_WEIGHTS = "linear.safetensors"
WEIGHT_KEY = "weight"
WEIGHT_DTYPES = ("F32", "F16", "BF16", "F64")


def check_linear_file(path: Path, what: str = f"{LINEAR_DIR}/{LINEAR_WEIGHTS}") -> int:
    """The width d of a pooled-linear weight file, from its checked header: exactly one tensor,
    ``weight``, a square float matrix."""
    header = read_safetensors_header(path, what)
    names = sorted(header.tensors)
    if names != [WEIGHT_KEY]:
        raise InvalidPackage(f"{what} must hold exactly one tensor, {WEIGHT_KEY!r}; it holds {names}")
    entry = header.tensors[WEIGHT_KEY]
    if entry.dtype not in WEIGHT_DTYPES:
        raise InvalidPackage(
            f"{what}: {WEIGHT_KEY!r} has dtype {entry.dtype}, not a float type ({', '.join(WEIGHT_DTYPES)})"
        )
    if len(entry.shape) != 2 or entry.shape[0] != entry.shape[1] or entry.shape[0] == 0:
        raise InvalidPackage(
            f"{what}: {WEIGHT_KEY!r} has shape {list(entry.shape)}, not a square d × d matrix"
        )
    return int(entry.shape[0])


def read_linear(path: Path, hidden_size: int, what: str = f"{LINEAR_DIR}/{LINEAR_WEIGHTS}") -> torch.Tensor:
    """The checked weight (d × d, float32) for a base of width ``hidden_size``."""
    import torch
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    width = check_linear_file(path, what)
    if width != hidden_size:
        raise InvalidPackage(
            f"{what}: {WEIGHT_KEY!r} is {width} × {width}, the base's embeddings have width {hidden_size}"
        )
    try:
        weight = load_file(str(path))[WEIGHT_KEY].float()
    except (OSError, SafetensorError) as exc:
        raise InvalidPackage(f"cannot read {what}: {exc}") from exc
    if not torch.isfinite(weight).all():
        raise InvalidPackage(f"{what}: {WEIGHT_KEY!r} has NaN or infinite values")
    return weight


def save_linear(folder: Path, weight: torch.Tensor) -> Path:
    """Write ``weight`` as ``<folder>/linear.safetensors``; returns the file."""
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / LINEAR_WEIGHTS
    save_file({WEIGHT_KEY: weight.detach().float().contiguous().cpu()}, str(path))
    return path


def fold_operator(operator: UTDOperator) -> torch.Tensor:
    """The UTD operator emb ← (I + α Xᵀ)·emb as the pooled-linear weight W = I + α Xᵀ (float32)."""
    import torch

    eye = torch.eye(operator.dim, dtype=torch.float64)
    return (eye + operator.effective().T).float()


def apply_linear(weight: torch.Tensor, pooled: torch.Tensor) -> torch.Tensor:
    """W · emb for pooled embeddings as rows (N × d): emb Wᵀ."""
    return pooled @ weight.to(device=pooled.device, dtype=pooled.dtype).T
