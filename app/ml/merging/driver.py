"""Merge drivers: stream whole models tensor by tensor, or merge LoRA learnwares in factor space."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from app.ml.adapters import LoraDelta
from app.ml.errors import InvalidInput
from app.ml.merging.lowrank import lowrank_pact_filter
from app.ml.merging.methods import MappedTaskVectors
from app.ml.merging.pact import PactConfig
from app.ml.merging.registry import get_method, merge_delta
from app.ml.merging.sources import DictSink, SafetensorsSink, TensorSink, TensorSource
from app.ml.progress import Progress

"""(done, total, message) → None, called after each tensor."""

LoraInput = LoraDelta | tuple[Tensor, Tensor, float]
"""One learnware's update of one weight: a `LoraDelta` or (B, A, scale)."""


@dataclass(frozen=True)
class MergeStats:
    """What a streaming merge did, tensor by tensor."""

    tensors: int
    merged: int
    """Tensors the method (and PACT) ran on."""
    averaged: int
    """Tensors the method does not cover, merged as θ0 + mean(τ)."""
    unchanged: int
    """Tensors every fine-tuned model left equal to the base, or non-float tensors: copied from the base."""
    seconds: float


def _notify(progress: Progress | None, done: int, total: int, message: str) -> None:
    if progress is not None:
        progress(done, total, message)


def stream_merge(
    base: TensorSource,
    finetuned: Sequence[TensorSource],
    method: str,
    params: Mapping[str, object] | None,
    sink: TensorSink,
    progress: Progress | None = None,
) -> MergeStats:
    """Merge `finetuned` models of `base` tensor by tensor into `sink`.

    Task vectors are rebuilt from the sources whenever a method reads them and never all held:
    peak memory is a few copies of the largest tensor (base, running sums, one τ_t; plus SVD
    factors for the SVD methods) on top of what `sink` keeps, whatever T is. A tensor no
    fine-tuned model changed is copied from the base. Tensors only the fine-tuned models have
    (task heads) are ignored; a base tensor missing from a fine-tuned model is an error.
    """
    spec = get_method(method)
    resolved = spec.resolve(params)
    if not finetuned:
        raise InvalidInput(f"{method}: no fine-tuned models to merge")
    names = base.keys()
    for index, source in enumerate(finetuned):
        missing = sorted(set(names) - set(source.keys()))
        if missing:
            shown = ", ".join(missing[:5]) + (" …" if len(missing) > 5 else "")
            raise InvalidInput(
                f"fine-tuned model {index} lacks {len(missing)} tensor(s) of the base: {shown}"
            )
    start = time.perf_counter()
    merged = averaged = unchanged = 0
    for done, name in enumerate(names, start=1):
        weight = base.get(name)
        if weight.is_floating_point() and _any_changed(name, weight, finetuned):
            base32 = weight.to(torch.float32)
            delta = merge_delta(name, weight, _source_task_vectors(name, base32, finetuned), spec, resolved)
            sink.write(name, (base32 + delta).to(weight.dtype))
            del delta, base32
            if spec.elementwise or weight.dim() == 2:
                merged += 1
            else:
                averaged += 1
        else:
            sink.write(name, weight)
            unchanged += 1
        del weight
        _notify(progress, done, len(names), name)
    sink.close()
    return MergeStats(len(names), merged, averaged, unchanged, time.perf_counter() - start)


def _read_checked(name: str, weight_shape: torch.Size, source: TensorSource, index: int) -> Tensor:
    other = source.get(name)
    if other.shape != weight_shape:
        raise InvalidInput(
            f"{name}: fine-tuned model {index} has shape {tuple(other.shape)} but the base has {tuple(weight_shape)}"
        )
    return other


def _any_changed(name: str, weight: Tensor, finetuned: Sequence[TensorSource]) -> bool:
    """Whether any fine-tuned model moved this tensor (reads one fine-tuned tensor at a time)."""
    changed = False
    for index, source in enumerate(finetuned):
        other = _read_checked(name, weight.shape, source, index)
        changed = changed or not torch.equal(other, weight)
        del other
    return changed


def _source_task_vectors(name: str, base32: Tensor, finetuned: Sequence[TensorSource]) -> Sequence[Tensor]:
    """τ_t = θ_t − θ0 of one tensor, read from source t each time it is asked for, never kept."""

    def read(index: int, source: TensorSource) -> Tensor:
        return _read_checked(name, base32.shape, source, index).to(torch.float32) - base32

    return MappedTaskVectors(finetuned, read)


def merge_state_dicts(
    base: TensorSource,
    finetuned: Sequence[TensorSource],
    method: str,
    params: Mapping[str, object] | None = None,
    progress: Progress | None = None,
) -> dict[str, Tensor]:
    """Merge `finetuned` models of `base` with `method`, streaming tensor by tensor; returns the merged state dict."""
    sink = DictSink()
    stream_merge(base, finetuned, method, params, sink, progress)
    return sink.tensors


def merge_into_safetensors(
    base: TensorSource,
    finetuned: Sequence[TensorSource],
    method: str,
    params: Mapping[str, object] | None,
    path: Path | str,
    progress: Progress | None = None,
    metadata: Mapping[str, str] | None = None,
) -> MergeStats:
    """Merge like `merge_state_dicts` but stream the merged tensors into a safetensors file at `path`."""
    with SafetensorsSink(path, metadata) as sink:
        return stream_merge(base, finetuned, method, params, sink, progress)


def as_lora_delta(value: LoraInput) -> LoraDelta:
    """A `LoraDelta` from a `LoraDelta` or a (B, A, scale) tuple."""
    if isinstance(value, LoraDelta):
        return value
    b, a, scale = value
    return LoraDelta(B=b, A=a, scale=float(scale))


def merge_lora(
    learnwares: Sequence[Mapping[str, LoraInput]],
    method: str,
    params: Mapping[str, object] | None = None,
    base_weights: Mapping[str, Tensor] | TensorSource | None = None,
    dense: bool = False,
    progress: Progress | None = None,
) -> dict[str, LoraDelta | Tensor]:
    """Merge LoRA learnwares given as {weight name: (B, A, scale)}, one mapping per learnware.

    Returns the merged update of every weight any learnware touches (θ = θ0 + update): as
    factors (rank ≤ Σr) for methods with a low-rank path (task_arithmetic, tsv_m, iso_c, iso_cts),
    as dense float32 matrices for the others or when `dense=True`. PACT needs `base_weights`
    (the pretrained weight of each filtered name).
    """
    spec = get_method(method)
    resolved = spec.resolve(params)
    pact = PactConfig.from_params(resolved)
    if not learnwares:
        raise InvalidInput(f"{method}: no learnwares to merge")
    names = list(dict.fromkeys(name for learnware in learnwares for name in learnware))
    merged: dict[str, LoraDelta | Tensor] = {}
    for done, name in enumerate(names, start=1):
        deltas: list[LoraDelta | None] = [
            as_lora_delta(learnware[name]) if name in learnware else None for learnware in learnwares
        ]
        present = [delta for delta in deltas if delta is not None]
        shape = present[0].shape
        for index, delta in enumerate(deltas):
            if delta is not None and delta.shape != shape:
                raise InvalidInput(
                    f"{name}: learnware {index} has a {delta.shape[0]}×{delta.shape[1]} update "
                    f"but another has {shape[0]}×{shape[1]}"
                )
        if pact is not None and pact.covers(name, torch.Size(shape)):
            if base_weights is None:
                raise InvalidInput(f"{method}: PACT needs the base weights; none given for {name!r}")
            base_weight = base_weights.get(name)
            if base_weight is None:
                raise InvalidInput(f"{method}: PACT needs the base weight {name!r}, which base_weights lacks")
            deltas = lowrank_pact_filter(name, base_weight, deltas, pact)
        if spec.lowrank is not None:
            update = spec.lowrank(name, deltas, resolved)
            merged[name] = update.dense() if dense else update
        else:
            taus = [torch.zeros(shape) if delta is None else delta.dense() for delta in deltas]
            merged[name] = spec.merge(name, taus, resolved)
        _notify(progress, done, len(names), name)
    return merged


def dense_update(update: LoraDelta | Tensor) -> Tensor:
    """A merged update as a dense float32 matrix, whether it came back as factors or dense."""
    return update.dense() if isinstance(update, LoraDelta) else update.to(torch.float32)


def apply_updates(base: Mapping[str, Tensor], updates: Mapping[str, LoraDelta | Tensor]) -> dict[str, Tensor]:
    """θ0 + update for every updated weight (other tensors are shared with `base`), in the base's dtype."""
    out = dict(base)
    for name, update in updates.items():
        if name not in base:
            raise InvalidInput(f"update for {name!r}, which the base does not have")
        dense = dense_update(update)
        if dense.shape != base[name].shape:
            raise InvalidInput(
                f"{name}: update has shape {tuple(dense.shape)} but the base has {tuple(base[name].shape)}"
            )
        out[name] = (base[name].to(torch.float32) + dense).to(base[name].dtype)
    return out
