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

Where a model's head reads nothing of the encoder's output but its first token and its pooled
output (BERT's, RoBERTa's and most sequence classifiers' heads; `reads_first_token_only` checks
it on the model itself when the runner loads it), the encoder's answer is also remembered text by
text (`TEXT_ROWS`): an agreement check pools the declared inputs of whichever learnwares it runs,
and a text one probe ran is not run again for another, whatever batch it comes in.
"""

from __future__ import annotations

import hashlib
import threading
import weakref
from collections import OrderedDict
from typing import Any

import torch
from torch import nn
from transformers.modeling_outputs import BaseModelOutputWithPooling

BODY_OUTPUTS_BYTES = 256 * 2**20
"""At most this many bytes of encoder outputs are remembered per process (least recently used
go first). One batch of 32 texts of 128 tokens from a 384-wide encoder is 6.3 MB; a shot check
of 20 probes on 64 examples, or an agreement check on 240 declared inputs (48 MB), fits whole
(a cost cap, not a choice on any benchmark)."""

TEXT_ROWS_BYTES = 64 * 2**20
"""At most this many bytes of per-text encoder rows (first token and pooled output) are
remembered per process: 3 KB a text for a 384-wide encoder, some 20,000 texts (a memory cap, not
a choice on any benchmark)."""

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
    if flat.numel():
        digest.update(flat.view(torch.uint8).numpy().data)


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


def _nbytes(value: Any) -> int | None:
    """The bytes of the tensors ``value`` holds (in tuples, lists and dicts: a model output is a
    dict), or None where it holds anything else (a key-value cache object, whose size is not
    seen): such an answer is not remembered."""
    if value is None:
        return 0
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    items = value.values() if isinstance(value, dict) else value if isinstance(value, (tuple, list)) else None
    if items is None:
        return None
    sizes = [_nbytes(item) for item in items]
    return None if any(size is None for size in sizes) else sum(size for size in sizes if size is not None)


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
        size = _nbytes(value)
        if size is None or size > self.capacity_bytes:
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
"""This process's remembered encoder outputs, by batch."""

TEXT_ROWS = BodyOutputs(TEXT_ROWS_BYTES)
"""This process's remembered encoder rows (first token, pooled output), by text."""

_CALL_TENSORS = ("input_ids", "attention_mask", "token_type_ids")
"""The tensors a call may carry for the encoder to answer it text by text; any other tensor
(position ids, embeddings given in place of ids, a head mask) runs the call whole."""


class SharedBody(nn.Module):
    """A model's encoder, shared with the other models that carry the same one: a call it has
    answered before is answered from `OUTPUTS` (and, with ``by_text``, text by text from
    `TEXT_ROWS`). Called exactly as the encoder it stands for (the classification model's forward
    calls it in the encoder's place); its outputs are shared between those models, so they are
    read, never written."""

    def __init__(self, body: nn.Module, fingerprint: str) -> None:
        super().__init__()
        self.body = body
        self.fingerprint = fingerprint
        self.by_text = False
        """Whether calls are answered text by text, with every row of the encoder's last hidden
        state zero but the first (set where the model's head was seen to read nothing else:
        `reads_first_token_only`)."""

    def __getattr__(self, name: str) -> Any:
        # A model's forward may read its encoder's attributes (its embeddings, its dtype), not
        # only call it: those of the encoder it stands for.
        try:
            return super().__getattr__(name)
        except AttributeError:
            body = self.__dict__.get("_modules", {}).get("body")  # not yet there while copied
            if body is None:
                raise
            return getattr(body, name)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        call = _by_text_call(args, kwargs) if self.by_text else None
        if call is not None:
            return self._by_text(*call)
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

    def _by_text(
        self, tensors: dict[str, torch.Tensor], options: dict[str, Any]
    ) -> BaseModelOutputWithPooling:
        """The encoder's answer to a batch, each text's first-token row and pooled output
        remembered by its own token ids (the padding left out), only the texts not yet seen run."""
        ids = tensors["input_ids"]
        mask = tensors.get("attention_mask")
        if mask is None:
            mask = torch.ones_like(ids)
        real = mask.bool()
        settings = tuple(sorted((k, _key_part(v)) for k, v in options.items()))
        keys = [
            (
                self.fingerprint,
                settings,
                tuple(
                    _key_part(t[row][real[row]])
                    for name, t in sorted(tensors.items())
                    if name != "attention_mask"
                ),
            )
            for row in range(ids.shape[0])
        ]
        rows: list[tuple[torch.Tensor, torch.Tensor | None] | None] = [TEXT_ROWS.get(k) for k in keys]
        missing = [i for i, found in enumerate(rows) if found is None]
        if missing:
            which = torch.tensor(missing, device=ids.device)
            answered = self.body(**{name: t[which] for name, t in tensors.items()}, **options)
            first = answered.last_hidden_state[:, 0]
            pooled = getattr(answered, "pooler_output", None)
            for j, i in enumerate(missing):
                row = (first[j].clone(), None if pooled is None else pooled[j].clone())
                rows[i] = row
                TEXT_ROWS.put(keys[i], row)
        known = [r for r in rows if r is not None]
        firsts = torch.stack([r[0] for r in known])
        hidden = firsts.new_zeros((ids.shape[0], ids.shape[1], firsts.shape[-1]))
        hidden[:, 0] = firsts
        pooled_rows = [r[1] for r in known if r[1] is not None]
        pooler = torch.stack(pooled_rows) if len(pooled_rows) == len(known) else None
        return BaseModelOutputWithPooling(last_hidden_state=hidden, pooler_output=pooler)


def _by_text_call(
    args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[dict[str, torch.Tensor], dict[str, Any]] | None:
    """A call's tensors (token ids, attention mask, token types) and its plain options, where the
    call can be answered text by text; None where it carries anything else (position ids, input
    embeddings, a head mask, a request for attentions or every layer's states)."""
    if len(args) > 1:
        return None
    given = dict(kwargs)
    if args:
        if "input_ids" in given:
            return None
        given["input_ids"] = args[0]
    tensors: dict[str, torch.Tensor] = {}
    options: dict[str, Any] = {}
    for name, value in given.items():
        if isinstance(value, torch.Tensor):
            if name not in _CALL_TENSORS:
                return None
            tensors[name] = value
        elif value is None:
            continue
        elif name in ("output_attentions", "output_hidden_states", "use_cache"):
            if value:
                return None
        elif isinstance(value, (bool, int, float, str)):
            options[name] = value
        else:
            return None
    ids = tensors.get("input_ids")
    if ids is None or ids.dim() != 2 or any(t.shape != ids.shape for t in tensors.values()):
        return None
    return tensors, options


def reads_first_token_only(
    model: nn.Module, shared: SharedBody, input_ids: torch.Tensor, attention_mask: torch.Tensor
) -> bool:
    """Whether ``model`` (its encoder ``shared``) gives the same logits on a padded batch of texts
    of different lengths when its encoder answers text by text: each text's first-token row and
    pooled output taken from the text run alone, unpadded, and the rest of the last hidden state
    zero. Then its head reads nothing else, and what it reads does not depend on the batch (a
    tokenizer that pads on the left puts a pad first, and fails), so the encoder may answer it
    text by text. Leaves ``shared.by_text`` set to the answer."""
    shared.by_text = False
    with torch.no_grad():
        whole = model(input_ids=input_ids, attention_mask=attention_mask).logits
        shared.by_text = True
        try:
            for row in range(input_ids.shape[0]):
                real = attention_mask[row].bool()
                model(input_ids=input_ids[row][real][None], attention_mask=attention_mask[row][real][None])
            rows = model(input_ids=input_ids, attention_mask=attention_mask).logits
        except (TypeError, AttributeError, IndexError, RuntimeError):
            rows = None
    shared.by_text = (
        rows is not None
        and rows.shape == whole.shape
        and bool(torch.allclose(rows, whole, atol=1e-5, rtol=1e-4))
    )
    return shared.by_text


_BODIES: weakref.WeakValueDictionary[str, nn.Module] = weakref.WeakValueDictionary()
"""Each encoder fingerprint's one module in this process, while a model carries it."""
_BODIES_LOCK = threading.Lock()


def share_body(model: nn.Module, device: torch.device) -> SharedBody | None:
    """Put a `SharedBody` in the place of ``model``'s encoder, around the process's one module of
    that encoder (the first model with it provides it; the others' own copies are dropped). None,
    and ``model`` untouched, where it has no separate encoder (``base_model`` is itself)."""
    prefix = getattr(model, "base_model_prefix", "")
    body = getattr(model, prefix, None) if prefix else None
    if not isinstance(body, nn.Module) or body is model:
        return None
    if isinstance(body, SharedBody):
        return body
    fingerprint = body_fingerprint(body, getattr(model, "config", None) or body.config, device)
    with _BODIES_LOCK:
        kept = _BODIES.get(fingerprint)
        if kept is None:
            kept = _BODIES[fingerprint] = body
    shared = SharedBody(kept, fingerprint)
    setattr(model, prefix, shared)
    if kept is not body:
        _own_memory(model, prefix)
    return shared


def _own_memory(model: nn.Module, prefix: str) -> None:
    """Copy ``model``'s tensors outside its encoder (its head) out of the weights file they may be
    mapped from: the file stays mapped while any tensor of it lives, so a head left on the mapping
    would keep the dropped encoder's pages in memory (13 MiniLM probes of the wide demo market,
    loaded and run: 1.29 GB of mapped file so, 0.23 GB with their heads copied, 0.76 GB unshared;
    the same 0.46 GB of anonymous memory in all three)."""
    with torch.no_grad():
        for name, module in model.named_modules():
            if name == prefix or name.startswith(prefix + "."):
                continue
            for param in module._parameters.values():
                if param is not None:
                    param.data = param.data.clone()
            for key, buffer in module._buffers.items():
                if buffer is not None:
                    module._buffers[key] = buffer.clone()
