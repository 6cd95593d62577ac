"""Sequence classifiers that carry the same encoder run it once.

A market holds many linear probes on one foundation model: each an ``hf-seqcls`` package with
its own copy of the frozen encoder and a different classification layer on top. Run one by
one, the shot check pays for that encoder once per probe on the same examples, and the worker
holds one copy of its weights per probe. Here the encoder (the model's ``base_model``) is
fingerprinted when the runner loads it: runners whose encoders are the same weights under the
same configuration share one module (`share_body`), and its outputs on a batch of token ids
are remembered for the next runner (`BODY_OUTPUTS_BYTES`): the second probe on the same
examples runs only its own head.

Exact by construction: the key is the encoder's weights, its configuration (less the
classification fields) and the token ids of the batch itself, so two tokenizers that split a
text differently never share an answer, and a probe whose encoder was fine-tuned by a single
value has a different fingerprint.
"""

from __future__ import annotations

import hashlib
import threading
import weakref
from collections import OrderedDict
from collections.abc import Iterable
from typing import Any

import torch
from torch import nn

BODY_OUTPUTS_BYTES = 256 * 2**20
"""At most this many bytes of encoder outputs are remembered per process (least recently used
go first). One batch of 32 texts of 128 tokens from a 384-wide encoder is 6.3 MB; a shot check
of 20 probes on 64 examples, or an agreement check on 240 declared inputs (48 MB), fits whole
(a cost cap, not a choice on any benchmark)."""

HEAD_ONLY_CONFIG = frozenset(
    {
        "_name_or_path",
        "architectures",
        "id2label",
        "label2id",
        "num_labels",
        "problem_type",
        "finetuning_task",
        "classifier_dropout",
        "transformers_version",
        "torch_dtype",
        "dtype",
    }
)
"""Configuration fields that only the classification layer (or nothing at run time) reads: left
out of the encoder's fingerprint, so probes of different label sets on one encoder match."""


def _update_with_tensor(digest: Any, name: str, tensor: torch.Tensor) -> None:
    flat = tensor.detach().cpu().contiguous().reshape(-1)
    digest.update(f"{name}|{flat.dtype}|{tuple(tensor.shape)}|".encode())
    digest.update(flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b"")


def body_fingerprint(body: nn.Module, config: Any, device: torch.device) -> str:
    """sha256 of an encoder: its class, its configuration less `HEAD_ONLY_CONFIG`, the
    attention implementation it runs, the device, and every tensor of its state (name, dtype,
    shape, bytes)."""
    digest = hashlib.sha256()
    settings = {k: v for k, v in config.to_dict().items() if k not in HEAD_ONLY_CONFIG}
    settings["_attn_implementation"] = getattr(config, "_attn_implementation", None)
    digest.update(f"{type(body).__module__}.{type(body).__qualname__}|{device}|".encode())
    digest.update(repr(sorted(settings.items(), key=lambda kv: kv[0])).encode())
    for name, tensor in body.state_dict().items():
        _update_with_tensor(digest, name, tensor)
    return digest.hexdigest()


def _key_part(value: Any) -> Any:
    """A hashable stand-in for one argument of an encoder call: a tensor by its dtype, shape
    and the sha256 of its bytes; plain values as they are."""
    if isinstance(value, torch.Tensor):
        digest = hashlib.sha256()
        _update_with_tensor(digest, "", value)
        return ("tensor", digest.hexdigest())
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return ("object", repr(value))


def _tensors(value: Any) -> Iterable[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _tensors(item)
    elif isinstance(value, (tuple, list)):
        for item in value:
            yield from _tensors(item)


class BodyOutputs:
    """What shared encoders answered, by (fingerprint, call): a byte-bounded LRU, thread-safe."""

    def __init__(self, capacity_bytes: int = BODY_OUTPUTS_BYTES) -> None:
        self.capacity_bytes = capacity_bytes
        self._entries: OrderedDict[tuple[Any, ...], tuple[Any, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, key: tuple[Any, ...]) -> Any | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                self.misses += 1
                return None
            self._entries.move_to_end(key)
            self.hits += 1
            return entry[0]

    def put(self, key: tuple[Any, ...], value: Any) -> None:
        size = sum(t.numel() * t.element_size() for t in _tensors(value))
        if size > self.capacity_bytes:
            return
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._bytes -= old[1]
            self._entries[key] = (value, size)
            self._bytes += size
            while self._bytes > self.capacity_bytes:
                _, (_, dropped) = self._entries.popitem(last=False)
                self._bytes -= dropped

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._bytes = 0

    def __len__(self) -> int:
        return len(self._entries)


OUTPUTS = BodyOutputs()
"""This process's remembered encoder outputs."""


class SharedBody(nn.Module):
    """An encoder that answers a call it has answered before from `OUTPUTS`. Called exactly as
    the encoder it wraps (the classification model's forward calls it in the encoder's place);
    its outputs are shared between the models that carry it, so they are read, never written."""

    def __init__(self, body: nn.Module, fingerprint: str) -> None:
        super().__init__()
        self.body = body
        self.fingerprint = fingerprint
        self.config = getattr(body, "config", None)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        key = (
            self.fingerprint,
            tuple(_key_part(a) for a in args),
            tuple(sorted((k, _key_part(v)) for k, v in kwargs.items())),
        )
        remembered = OUTPUTS.get(key)
        if remembered is not None:
            return remembered
        answered = self.body(*args, **kwargs)
        OUTPUTS.put(key, answered)
        return answered


_BODIES: weakref.WeakValueDictionary[str, SharedBody] = weakref.WeakValueDictionary()
_BODIES_LOCK = threading.Lock()


def share_body(model: nn.Module, device: torch.device) -> SharedBody | None:
    """Put the process's `SharedBody` of ``model``'s encoder in the encoder's place (the first
    model with that encoder provides it; the others' own copies are dropped). None, and
    ``model`` untouched, where it has no separate encoder (``base_model`` is itself)."""
    prefix = getattr(model, "base_model_prefix", "")
    body = getattr(model, prefix, None) if prefix else None
    if not isinstance(body, nn.Module) or body is model:
        return None
    if isinstance(body, SharedBody):
        return body
    fingerprint = body_fingerprint(body, getattr(model, "config", None) or body.config, device)
    with _BODIES_LOCK:
        shared = _BODIES.get(fingerprint)
        if shared is None:
            shared = SharedBody(body, fingerprint)
            _BODIES[fingerprint] = shared
    setattr(model, prefix, shared)
    return shared
