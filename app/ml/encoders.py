"""Base encoders: fingerprint their weights, load them offline, tokenise, pool.

Where a base lives (its alias or its directory) is ``app.ml.bases``'s business. Its identity in a
spec space is the sha256 of its weight files, never its name.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModel, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from app.ml.bases import resolve_base
from app.ml.errors import InvalidInput, UnknownBase
from app.ml.threads import torch_threads

log = logging.getLogger(__name__)


# LoRA placement per architecture: the attention query and value projections.
LORA_TARGETS: dict[str, tuple[str, ...]] = {
    "bert": ("query", "value"),
    "roberta": ("query", "value"),
    "xlm-roberta": ("query", "value"),
    "mpnet": ("q", "v"),
}


def weights_sha256(path: Path) -> str:
    """sha256 over the base's safetensors files (sorted by name): the base's identity."""
    return _weights_sha256_cached(str(path.resolve()), _mtime_key(path))


def _mtime_key(path: Path) -> tuple[tuple[str, int, int], ...]:
    return tuple((f.name, f.stat().st_size, f.stat().st_mtime_ns) for f in sorted(path.glob("*.safetensors")))


@lru_cache(maxsize=16)
def _weights_sha256_cached(path: str, _key: tuple[tuple[str, int, int], ...]) -> str:
    digest = hashlib.sha256()
    for file in sorted(Path(path).glob("*.safetensors")):
        digest.update(file.name.encode())
        with file.open("rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                digest.update(chunk)
    return digest.hexdigest()


def configure_threads() -> None:
    """Torch threads on a CPU-only host: those given to ``threads.use_torch_threads``, else every core.

    Several torch processes sharing the cores (API, workers, tests) each spinning every core
    run many times slower than with one thread each: set PAVEDOCK_TORCH_THREADS=1 for them.
    """
    if torch.cuda.is_available():
        return
    torch.set_num_threads(torch_threads() or os.cpu_count() or 1)


def default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


@dataclass(frozen=True)
class Encoder:
    """A loaded base: tokenizer, frozen model, and where they came from."""

    path: Path
    sha256: str
    tokenizer: PreTrainedTokenizerBase
    model: PreTrainedModel

    @property
    def model_type(self) -> str:
        return str(self.model.config.model_type)

    @property
    def hidden_size(self) -> int:
        return int(self.model.config.hidden_size)

    @property
    def num_layers(self) -> int:
        return int(self.model.config.num_hidden_layers)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.model.parameters())


_load_lock = threading.Lock()


def load_encoder(
    name_or_path: str | Path, *, fresh: bool = False, device: torch.device | None = None
) -> Encoder:
    """Load a base encoder offline (safetensors only, never remote code).

    Loaded bases are shared per process; ``fresh=True`` returns a private copy that the
    caller may modify (for example by injecting LoRA layers).
    """
    path = resolve_base(name_or_path)
    dev = device or default_device()
    if fresh:
        return _load(path, dev)
    with _load_lock:
        return _load_shared(str(path), str(dev))


@lru_cache(maxsize=4)
def _load_shared(path: str, device: str) -> Encoder:
    return _load(Path(path), torch.device(device))


def _load(path: Path, device: torch.device) -> Encoder:
    configure_threads()
    config = AutoConfig.from_pretrained(path, trust_remote_code=False, local_files_only=True)
    if config.model_type not in LORA_TARGETS:
        log.warning("base %s has architecture %r without a LoRA placement", path, config.model_type)
    tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=False, local_files_only=True)
    model = AutoModel.from_pretrained(
        path, config=config, trust_remote_code=False, use_safetensors=True, local_files_only=True
    )
    model.to(device).eval()
    for param in model.parameters():
        param.requires_grad_(False)
    return Encoder(path=path, sha256=weights_sha256(path), tokenizer=tokenizer, model=model)


def lora_targets(model_type: str) -> tuple[str, ...]:
    try:
        return LORA_TARGETS[model_type]
    except KeyError:
        known = ", ".join(sorted(LORA_TARGETS))
        raise UnknownBase(f"no LoRA placement for architecture {model_type!r}; known: {known}") from None


def mean_pool(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Average token states over the non-padding positions."""
    mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)


def check_texts(texts: Sequence[str]) -> list[str]:
    """Refuse an empty batch and empty or non-string texts, naming the first bad position."""
    if len(texts) == 0:
        raise InvalidInput("no texts given")
    out: list[str] = []
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise InvalidInput(f"text {i} is a {type(text).__name__}, not a string")
        if not text.strip():
            raise InvalidInput(f"text {i} is empty")
        out.append(text)
    return out


@dataclass(frozen=True)
class TokenBatch:
    """One padded batch and the positions of its texts in the caller's list."""

    indices: list[int]
    inputs: dict[str, torch.Tensor]


def token_lengths(tokenizer: PreTrainedTokenizerBase, texts: Sequence[str]) -> list[int]:
    """Each text's token count with the special tokens, before any truncation."""
    return [
        len(ids) for ids in tokenizer(list(texts), add_special_tokens=True, truncation=False)["input_ids"]
    ]


def token_batches(
    tokenizer: PreTrainedTokenizerBase,
    texts: Sequence[str],
    *,
    batch_size: int,
    max_tokens: int,
    device: torch.device,
) -> Iterator[TokenBatch]:
    """Tokenise in length-sorted batches with dynamic padding; warn once about truncation.

    Texts longer than ``max_tokens`` tokens are truncated (the spec describes the first
    ``max_tokens`` tokens), and the number truncated is logged.
    """
    lengths = token_lengths(tokenizer, texts)
    truncated = sum(1 for n in lengths if n > max_tokens)
    if truncated:
        log.warning("%d of %d texts exceed %d tokens and were truncated", truncated, len(texts), max_tokens)
    order = sorted(range(len(texts)), key=lambda i: lengths[i])
    for start in range(0, len(order), batch_size):
        idx = order[start : start + batch_size]
        enc = tokenizer(
            [texts[i] for i in idx],
            padding="longest",
            truncation=True,
            max_length=max_tokens,
            return_tensors="pt",
        )
        yield TokenBatch(indices=idx, inputs={k: v.to(device) for k, v in enc.items()})


@torch.no_grad()
def embed_texts(
    encoder: Encoder,
    texts: Sequence[str],
    *,
    batch_size: int = 64,
    max_tokens: int = 128,
    model: torch.nn.Module | None = None,
) -> torch.Tensor:
    """Mean-pooled features of ``texts`` (rows in input order), float32 on the CPU."""
    texts = check_texts(texts)
    net = model if model is not None else encoder.model
    out = torch.empty(len(texts), encoder.hidden_size)
    for batch in token_batches(
        encoder.tokenizer, texts, batch_size=batch_size, max_tokens=max_tokens, device=encoder.device
    ):
        hidden = net(**batch.inputs).last_hidden_state
        out[batch.indices] = mean_pool(hidden, batch.inputs["attention_mask"]).float().cpu()
    return out
