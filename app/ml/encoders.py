"""Base encoders: fingerprint their weights, load them offline, tokenise, pool.

Where a base lives (its alias or its directory) is ``app.ml.bases``'s business. Its identity in a
spec space is the sha256 of its weight files, never its name.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TypeVar

import numpy as np
import torch
from transformers import AutoConfig, AutoModel, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from app.ml.bases import resolve_base
from app.ml.errors import InvalidInput, UnknownBase
from app.ml.threads import torch_threads

log = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")


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


def side_by_side(fn: Callable[[T], R], items: Sequence[T], device: torch.device) -> Iterator[R]:
    """``fn`` of each item, in order; on a CPU with several torch threads, items run side by side,
    one thread each.

    Torch splits every operation over its threads, and on a small batch the split costs more
    than it saves: a forward and backward pass of the default base on an 8-token text took 94 ms
    on 2 threads and 38 ms on one (this 2-core VM, ``OMP_WAIT_POLICY=PASSIVE``). Running two
    batches at once, one thread each, keeps both cores busy without splitting: 32-shot user specs
    took 0.64 of the time of the same batches in turn (the sum of six sets' medians, 4 rounds
    interleaved, 2026-12-02), identical vectors.

    Items are handed out in the order given (put the largest first) and their results come back in
    that order, so a sum over them is the same whatever thread ran what. The pool's threads set
    torch's thread count to one, which is process-wide for threads that start meanwhile; the
    caller's count is restored when the last item is done.
    """
    threads = torch.get_num_threads()
    if device.type != "cpu" or threads < 2 or len(items) < 2:
        yield from map(fn, items)
        return

    def on_one_thread(item: T) -> R:
        torch.set_num_threads(1)
        return fn(item)

    pool = ThreadPoolExecutor(max_workers=min(threads, len(items)), thread_name_prefix="side-by-side")
    try:
        yield from pool.map(on_one_thread, items)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        torch.set_num_threads(threads)


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


BATCH_OVERHEAD_TOKENS = 32
"""What one more batch costs, in padded tokens' worth, when `plan_batches` weighs padding against
the batch count. On a CPU the batches run side by side, one thread each (`side_by_side`), where a
batch's fixed cost is small. Timed interleaved with fixed batches of 16 in turn (the sum of the
sets' median 32-shot spec times, 2 threads, ``OMP_WAIT_POLICY=PASSIVE``, 2026-12-02), 32 / 64 / 128
gave 2.90 / 2.90 / 2.95 s against 5.47 on the six sets `bench spec-time` uses (seed 0), and
2.44 / 2.67 / 2.95 s against 4.47 on six others (mr, banking77, uci_imdb, tweet_sentiment, subj,
davidson_hate; seed 1). Run in turn on 2 threads, where every batch pays for splitting each
operation, 128 was the better value (0.87 of fixed batches' time, 32: 0.99)."""


def plan_batches(
    lengths: Sequence[int], *, token_budget: int, overhead: int = BATCH_OVERHEAD_TOKENS
) -> list[list[int]]:
    """Split texts of the given (already capped) token ``lengths`` into the batches that cost least.

    A batch pads to its longest text, so the texts are sorted by length and each batch is a run of
    neighbours; the split minimises the padded tokens plus ``overhead`` per batch (dynamic
    programming over the sorted lengths), with at most ``token_budget`` padded tokens a batch (a
    text longer than that is a batch alone). On six 32-shot user sets, sorted batches of 16 padded
    to 1.24–1.73 times the real tokens (one 127-token news item padded a batch of texts near 60);
    this split pads to 1.07–1.23 times. Returns positions into ``lengths``, in order of length.
    """
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    sorted_lengths = np.asarray([lengths[i] for i in order], dtype=np.int64)
    cost = np.zeros(len(order) + 1)
    start = np.zeros(len(order) + 1, dtype=np.int64)
    for end in range(1, len(order) + 1):  # the last batch is order[first:end], padded to its last
        longest = int(sorted_lengths[end - 1])
        lowest = max(0, end - max(1, token_budget // max(1, longest)))
        firsts = np.arange(lowest, end)
        options = cost[lowest:end] + (end - firsts) * longest + overhead
        best = int(np.argmin(options))
        cost[end], start[end] = options[best], lowest + best
    batches: list[list[int]] = []
    end = len(order)
    while end > 0:
        batches.append(order[int(start[end]) : end])
        end = int(start[end])
    return batches[::-1]


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
    ``max_tokens`` tokens), and the number truncated is logged. The batches are `plan_batches`'s,
    each within the padded tokens of ``batch_size`` texts of ``max_tokens`` (the memory a batch
    may take), so their sizes vary: for callers that sum or collect per-text results, which do not
    depend on how the texts were batched.
    """
    lengths = token_lengths(tokenizer, texts)
    truncated = sum(1 for n in lengths if n > max_tokens)
    if truncated:
        log.warning("%d of %d texts exceed %d tokens and were truncated", truncated, len(texts), max_tokens)
    capped = [min(n, max_tokens) for n in lengths]
    for idx in plan_batches(capped, token_budget=batch_size * max_tokens):
        enc = tokenizer(
            [texts[i] for i in idx],
            padding="longest",
            truncation=True,
            max_length=max_tokens,
            return_tensors="pt",
        )
        yield TokenBatch(indices=idx, inputs={k: v.to(device) for k, v in enc.items()})


def run_batches(
    fn: Callable[[TokenBatch], R], batches: Sequence[TokenBatch], device: torch.device
) -> Iterator[tuple[TokenBatch, R]]:
    """``fn`` of each batch, the largest first, side by side on a CPU's threads (`side_by_side`):
    (batch, result) pairs in that order, the same order on every run. ``fn`` runs on the pool's
    threads, so it sets its own grad mode (``torch.no_grad`` holds per thread)."""
    ordered = sorted(batches, key=lambda b: -b.inputs["input_ids"].numel())
    return zip(ordered, side_by_side(fn, ordered, device), strict=True)


def embed_texts(
    encoder: Encoder,
    texts: Sequence[str],
    *,
    batch_size: int = 64,
    max_tokens: int = 128,
    model: torch.nn.Module | None = None,
) -> torch.Tensor:
    """Mean-pooled features of ``texts`` (rows in input order), float32 on the CPU (`run_batches`)."""
    texts = check_texts(texts)
    net = model if model is not None else encoder.model
    out = torch.empty(len(texts), encoder.hidden_size)
    batches = list(
        token_batches(
            encoder.tokenizer, texts, batch_size=batch_size, max_tokens=max_tokens, device=encoder.device
        )
    )

    def pooled(batch: TokenBatch) -> torch.Tensor:
        with torch.no_grad():
            hidden = net(**batch.inputs).last_hidden_state
            return mean_pool(hidden, batch.inputs["attention_mask"]).float().cpu()

    for batch, rows in run_batches(pooled, batches, encoder.device):
        out[batch.indices] = rows
    return out
