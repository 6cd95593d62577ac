"""BiCo: move a task vector to another base by aligning both sides of each linear layer.

A linear layer's fine-tuning update is a sum of outer products of output-side gradients and
input-side activations, τ = −Σ η g xᵀ. BiCo runs one forward and backward pass of the
label-name head loss through both *pretrained* bases on a few calibration examples, collects
per matched layer the input activations X and the gradients G with respect to the layer's
output, and solves two orthogonal Procrustes problems:

    C_in = X_Aᵀ X_B,  R_in = U Vᵀ (svd of C_in);  C_out = G_Aᵀ G_B,  R_out likewise;
    τ_B = R_outᵀ τ_A R_in.

Rows of X and G must be the same inputs seen by both models. The two bases have their own
tokenizers, so rows are **words**: each text is split into words (``\\w+`` runs and single
punctuation marks, by character offsets), a model's row for a word is the mean of its token
rows inside that word, and only words both models kept after truncation count; the first and
the last special token ([CLS]/<s>, [SEP]/</s>) are matched to each other. This keeps many rows
per example (a pooled row per example would leave C rank ≤ N, and R arbitrary outside that
span at N = 16) and needs no shared vocabulary. ``alignment="pooled"`` (one mean row per
example) is kept as an option. Covariances are accumulated in float64, batch by batch.

Layers are matched by depth (``layer_pairs``): each target layer takes its nearest source
layer's update; for a shallower target, ``layers="all"`` instead folds every source layer into
its nearest target layer (a sum: k rank-r updates give rank ≤ k·r, which the saved adapter keeps).

Baselines share the machinery: THESEUS-style (R_out from output activations, no backward),
input-only and output-only alignment (the other side padded or truncated) and naive (both
sides padded or truncated).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Literal

import torch
import torch.nn.functional as F
from transformers import PreTrainedTokenizerBase

from app.ml.encoders import Encoder, check_texts, mean_pool
from app.ml.errors import InvalidInput
from app.ml.head import LabelNameHead
from app.ml.progress import Progress
from app.ml.transfer.taskvec import (
    INPUT_GROUP,
    Key,
    TaskVector,
    depth_map,
    linear_modules,
    module_map,
)

Alignment = Literal["word", "pooled"]
BicoMode = Literal["bico", "theseus", "input_only", "output_only", "naive"]
Statistic = Literal["act_in", "act_out", "grad_out"]

# What each mode reads from the calibration pass for its input and output side.
MODE_SIDES: dict[str, tuple[Statistic | None, Statistic | None]] = {
    "bico": ("act_in", "grad_out"),
    "theseus": ("act_in", "act_out"),
    "input_only": ("act_in", None),
    "output_only": (None, "grad_out"),
    "naive": (None, None),
}

_WORD = re.compile(r"\w+|[^\w\s]")


@dataclass(frozen=True)
class LayerPair:
    """A target linear layer and the source layer whose update it receives."""

    role: str
    source_layer: int
    target_layer: int

    @property
    def source(self) -> Key:
        return (self.source_layer, self.role)

    @property
    def target(self) -> Key:
        return (self.target_layer, self.role)


LayerMap = Literal["all", "nearest"]


def layer_pairs(
    tv: TaskVector, source_layers: int, target_layers: int, target_type: str, layers: LayerMap = "nearest"
) -> list[LayerPair]:
    """The (source layer, target layer) pairs of every role in ``tv``, by depth.

    A deeper-or-equal target: target layer j takes source layer i(j) = round(j·(L_A−1)/(L_B−1))
    (every source layer is used, some twice). A shallower target: with ``"nearest"`` (the
    default) the same i(j), so some source layers go unused (12 → 6: layers 0, 2, 4, 7, 9, 11);
    with ``"all"`` every source layer i goes to its nearest target layer
    j(i) = round(i·(L_B−1)/(L_A−1)) and a target layer receives the sum of the moved updates of
    the source layers it stands for (12 → 6: two each). The MPNet → MiniLM benchmark measures
    both (``bico`` folds, ``bico_nearest`` does not).
    """
    module_map(target_type)
    if layers not in ("all", "nearest"):
        raise InvalidInput(f"unknown layer map {layers!r}; known: all, nearest")
    if layers == "all" and source_layers > target_layers:
        targets = depth_map(target_layers, source_layers)
        links = [(i, targets[i]) for i in range(source_layers)]
    else:
        sources = depth_map(source_layers, target_layers)
        links = [(sources[j], j) for j in range(target_layers)]
    pairs = [LayerPair(role, i, j) for role in tv.roles for i, j in links if (i, role) in tv.deltas]
    if not pairs:
        raise InvalidInput("the task vector updates no layer that maps onto the target")
    return pairs


def fan_in(pairs: Sequence[LayerPair]) -> int:
    """The most source layers summed into one target layer (the rank multiplier of a transfer)."""
    counts: dict[Key, int] = {}
    for pair in pairs:
        counts[pair.target] = counts.get(pair.target, 0) + 1
    return max(counts.values(), default=0)


@dataclass
class CrossStats:
    """Streaming float64 cross-products Σ a bᵀ of matched rows, per statistic and layer pair."""

    sums: dict[tuple[Statistic, str, int, int], torch.Tensor] = field(default_factory=dict)
    rows: int = 0
    examples: int = 0
    seconds: float = 0.0
    """Wall time of the calibration pass up to this snapshot."""

    def add(self, key: tuple[Statistic, str, int, int], a: torch.Tensor, b: torch.Tensor) -> None:
        prod = a.double().T @ b.double()
        if key in self.sums:
            self.sums[key] += prod
        else:
            self.sums[key] = prod

    def copy(self) -> CrossStats:
        return CrossStats(
            {k: v.clone() for k, v in self.sums.items()}, self.rows, self.examples, self.seconds
        )

    def matrix(self, statistic: Statistic, pair: LayerPair) -> torch.Tensor:
        group = INPUT_GROUP[pair.role] if statistic == "act_in" else pair.role
        try:
            return self.sums[(statistic, group, pair.source_layer, pair.target_layer)]
        except KeyError:
            raise InvalidInput(f"no {statistic} statistics collected for {pair}") from None


def _word_index(text: str) -> list[int]:
    """Word id of every character (−1 for whitespace)."""
    index = [-1] * len(text)
    for w, match in enumerate(_WORD.finditer(text)):
        for c in range(match.start(), match.end()):
            index[c] = w
    return index


def _token_words(
    offsets: list[tuple[int, int]], special: list[int], mask: list[int], chars: list[int]
) -> list[object]:
    """Alignment key of each token: a word id, "first"/"last" for the bounding special tokens."""
    keys: list[object] = [None] * len(offsets)
    real = [t for t, m in enumerate(mask) if m]
    specials = [t for t in real if special[t]]
    if specials:
        keys[specials[0]] = "first"
        if specials[-1] != specials[0]:
            keys[specials[-1]] = "last"
    for t in real:
        start, end = offsets[t]
        if special[t] or end <= start:
            continue
        word = next((chars[c] for c in range(start, min(end, len(chars))) if chars[c] >= 0), -1)
        if word >= 0:
            keys[t] = word
    return keys


def _tokenise(
    tokenizer: PreTrainedTokenizerBase, texts: list[str], max_tokens: int
) -> tuple[dict[str, torch.Tensor], list[list[object]]]:
    enc = tokenizer(
        texts,
        padding="longest",
        truncation=True,
        max_length=max_tokens,
        return_tensors="pt",
        return_offsets_mapping=True,
        return_special_tokens_mask=True,
    )
    offsets = enc.pop("offset_mapping").tolist()
    special = enc.pop("special_tokens_mask").tolist()
    masks = enc["attention_mask"].tolist()
    keys = [
        _token_words([tuple(o) for o in offsets[b]], special[b], masks[b], _word_index(text))
        for b, text in enumerate(texts)
    ]
    return dict(enc), keys


def row_assignments(
    keys_a: list[list[object]], keys_b: list[list[object]], len_a: int, len_b: int, alignment: Alignment
) -> tuple[torch.Tensor, torch.Tensor]:
    """Averaging matrices P_A (rows × B·T_A), P_B (rows × B·T_B) mapping tokens to matched rows."""
    rows_a: list[list[int]] = []
    rows_b: list[list[int]] = []
    for b, (ka, kb) in enumerate(zip(keys_a, keys_b, strict=True)):
        if alignment == "pooled":
            rows_a.append([b * len_a + t for t, k in enumerate(ka) if k is not None])
            rows_b.append([b * len_b + t for t, k in enumerate(kb) if k is not None])
            continue
        groups_a: dict[object, list[int]] = {}
        groups_b: dict[object, list[int]] = {}
        for t, k in enumerate(ka):
            if k is not None:
                groups_a.setdefault(k, []).append(b * len_a + t)
        for t, k in enumerate(kb):
            if k is not None:
                groups_b.setdefault(k, []).append(b * len_b + t)
        for k in groups_a:
            if k in groups_b:
                rows_a.append(groups_a[k])
                rows_b.append(groups_b[k])
    p_a = torch.zeros(len(rows_a), len(keys_a) * len_a)
    p_b = torch.zeros(len(rows_b), len(keys_b) * len_b)
    for r, (ta, tb) in enumerate(zip(rows_a, rows_b, strict=True)):
        p_a[r, ta] = 1.0 / len(ta)
        p_b[r, tb] = 1.0 / len(tb)
    return p_a, p_b


class _Recorder:
    """Forward hooks that keep the inputs, outputs and output-gradients of chosen linear layers."""

    def __init__(self, modules: dict[Key, torch.nn.Linear], want: set[Statistic]):
        self.acts_in: dict[tuple[str, int], torch.Tensor] = {}
        self.acts_out: dict[tuple[str, int], torch.Tensor] = {}
        self.grads_out: dict[tuple[str, int], torch.Tensor] = {}
        self._handles: list[torch.utils.hooks.RemovableHandle] = []
        seen_groups: set[tuple[str, int]] = set()
        for (layer, role), module in modules.items():
            group = (INPUT_GROUP[role], layer)
            record_in = "act_in" in want and group not in seen_groups
            seen_groups.add(group)
            self._handles.append(
                module.register_forward_hook(self._hook((role, layer), group, record_in, want))
            )

    def _hook(
        self, key: tuple[str, int], group: tuple[str, int], record_in: bool, want: set[Statistic]
    ) -> Callable[[torch.nn.Module, tuple[torch.Tensor, ...], torch.Tensor], None]:
        def hook(_module: torch.nn.Module, inputs: tuple[torch.Tensor, ...], output: torch.Tensor) -> None:
            if record_in:
                self.acts_in[group] = inputs[0].detach()
            if "act_out" in want:
                self.acts_out[key] = output.detach()
            if "grad_out" in want and output.requires_grad:

                def keep(grad: torch.Tensor) -> None:
                    self.grads_out[key] = grad.detach()

                output.register_hook(keep)

        return hook

    def clear(self) -> None:
        self.acts_in.clear()
        self.acts_out.clear()
        self.grads_out.clear()

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()


@contextmanager
def _recording(encoder: Encoder, keys: list[Key], want: set[Statistic]) -> Iterator[_Recorder]:
    """Hook ``keys``; with gradients wanted, make the embeddings' output a leaf that needs grad."""
    recorder = _Recorder(linear_modules(encoder.model, encoder.model_type, keys), want)
    handle = None
    if "grad_out" in want:

        def leaf(_m: torch.nn.Module, _i: tuple[torch.Tensor, ...], out: torch.Tensor) -> torch.Tensor:
            return out.detach().requires_grad_(True)

        handle = encoder.model.get_input_embeddings().register_forward_hook(leaf)
    try:
        yield recorder
    finally:
        recorder.remove()
        if handle is not None:
            handle.remove()


def _run(
    encoder: Encoder,
    recorder: _Recorder,
    inputs: dict[str, torch.Tensor],
    head: LabelNameHead,
    labels: torch.Tensor,
    backward: bool,
) -> None:
    inputs = {k: v.to(encoder.device) for k, v in inputs.items()}
    recorder.clear()
    with torch.set_grad_enabled(backward):
        hidden = encoder.model(**inputs).last_hidden_state
        if backward:
            logits = head.logits(mean_pool(hidden.float(), inputs["attention_mask"]))
            F.cross_entropy(logits, labels.to(logits.device), reduction="sum").backward()


def _rows(p: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    return p @ t.reshape(-1, t.shape[-1]).float().cpu()


def collect_cross_stats(
    source: Encoder,
    target: Encoder,
    pairs: Sequence[LayerPair],
    texts: Sequence[str],
    labels: Sequence[int],
    label_names: Sequence[str],
    *,
    statistics: Sequence[Statistic] = ("act_in", "grad_out", "act_out"),
    alignment: Alignment = "word",
    checkpoints: Sequence[int] | None = None,
    batch_size: int = 16,
    max_tokens: int = 128,
    temperature: float = 0.05,
    progress: Progress | None = None,
) -> list[CrossStats]:
    """One forward (and, for gradients, backward) pass through both pretrained bases.

    Returns the statistics after the first n examples for each n in ``checkpoints``, in
    increasing order (default: all texts), so nested calibration sets cost a single pass.
    """
    texts = check_texts(texts)
    if len(labels) != len(texts):
        raise InvalidInput(f"{len(texts)} calibration texts but {len(labels)} labels")
    y = torch.as_tensor(list(labels), dtype=torch.long)
    if y.min() < 0 or y.max() >= len(label_names):
        raise InvalidInput(
            f"calibration labels must lie in [0, {len(label_names)}), got {int(y.min())}..{int(y.max())}"
        )
    ends = sorted(set(checkpoints or [len(texts)]))
    if ends[0] < 1 or ends[-1] > len(texts):
        raise InvalidInput(f"checkpoints {ends} must lie in [1, {len(texts)}]")
    want = set(statistics)
    backward = "grad_out" in want
    heads = [LabelNameHead.from_names(enc, label_names, temperature) for enc in (source, target)]
    keys_src = sorted({p.source for p in pairs})
    keys_tgt = sorted({p.target for p in pairs})
    stats = CrossStats()
    snapshots: list[CrossStats] = []
    total = sum((e - s + batch_size - 1) // batch_size for s, e in zip([0, *ends[:-1]], ends, strict=True))
    done = 0
    started = time.perf_counter()
    with _recording(source, keys_src, want) as rec_a, _recording(target, keys_tgt, want) as rec_b:
        start = 0
        for end in ends:
            segment = list(range(start, end))
            segment.sort(key=lambda i: len(texts[i]))
            for b0 in range(0, len(segment), batch_size):
                idx = segment[b0 : b0 + batch_size]
                batch = [texts[i] for i in idx]
                inputs_a, words_a = _tokenise(source.tokenizer, batch, max_tokens)
                inputs_b, words_b = _tokenise(target.tokenizer, batch, max_tokens)
                len_a, len_b = inputs_a["input_ids"].shape[1], inputs_b["input_ids"].shape[1]
                p_a, p_b = row_assignments(words_a, words_b, len_a, len_b, alignment)
                _run(source, rec_a, inputs_a, heads[0], y[idx], backward)
                _run(target, rec_b, inputs_b, heads[1], y[idx], backward)
                added_in: set[tuple[str, int, int]] = set()
                for pair in pairs:
                    i, j = pair.source_layer, pair.target_layer
                    group = INPUT_GROUP[pair.role]
                    if "act_in" in want and (group, i, j) not in added_in:
                        added_in.add((group, i, j))
                        stats.add(
                            ("act_in", group, i, j),
                            _rows(p_a, rec_a.acts_in[(group, i)]),
                            _rows(p_b, rec_b.acts_in[(group, j)]),
                        )
                    if "act_out" in want:
                        stats.add(
                            ("act_out", pair.role, i, j),
                            _rows(p_a, rec_a.acts_out[(pair.role, i)]),
                            _rows(p_b, rec_b.acts_out[(pair.role, j)]),
                        )
                    if backward:
                        stats.add(
                            ("grad_out", pair.role, i, j),
                            _rows(p_a, rec_a.grads_out[(pair.role, i)]),
                            _rows(p_b, rec_b.grads_out[(pair.role, j)]),
                        )
                stats.rows += p_a.shape[0]
                stats.examples += len(idx)
                done += 1
                if progress:
                    progress(done, total, f"calibration pass, {stats.examples} examples")
            stats.seconds = time.perf_counter() - started
            snapshots.append(stats.copy())
            start = end
    return snapshots


def procrustes(cross: torch.Tensor) -> torch.Tensor:
    """R = U Vᵀ from svd(C) = U S Vᵀ: the semi-orthogonal d_A × d_B map that best aligns C."""
    if cross.ndim != 2:
        raise ValueError(f"cross-covariance must be a matrix, got shape {tuple(cross.shape)}")
    u, _, vh = torch.linalg.svd(cross.double(), full_matrices=False)
    return u @ vh


def pad_identity(d_a: int, d_b: int) -> torch.Tensor:
    """The naive d_A × d_B map: identity on the shared coordinates, zero padding elsewhere."""
    return torch.eye(d_a, d_b, dtype=torch.float64)


@dataclass(frozen=True)
class PairMaps:
    """The input-side and output-side maps of one layer pair."""

    r_in: torch.Tensor
    r_out: torch.Tensor


def pair_maps(
    mode: BicoMode,
    stats: CrossStats | None,
    pair: LayerPair,
    source_shape: torch.Size,
    target_shape: torch.Size,
) -> PairMaps:
    """R_in (d_inA × d_inB) and R_out (d_outA × d_outB) of ``mode`` for one layer pair."""
    try:
        side_in, side_out = MODE_SIDES[mode]
    except KeyError:
        raise InvalidInput(f"unknown BiCo mode {mode!r}; known: {', '.join(MODE_SIDES)}") from None
    (out_a, in_a), (out_b, in_b) = source_shape, target_shape
    if (side_in or side_out) and stats is None:
        raise InvalidInput(f"mode {mode!r} needs calibration statistics")
    r_in = procrustes(stats.matrix(side_in, pair)) if side_in and stats else pad_identity(in_a, in_b)
    r_out = procrustes(stats.matrix(side_out, pair)) if side_out and stats else pad_identity(out_a, out_b)
    return PairMaps(r_in, r_out)


def transfer_task_vector(
    tv: TaskVector,
    pairs: Sequence[LayerPair],
    target_shapes: dict[Key, torch.Size],
    mode: BicoMode,
    stats: CrossStats | None,
    target_type: str,
    alpha: float = 1.0,
) -> tuple[TaskVector, dict[tuple[Key, Key], PairMaps]]:
    """τ_B = α·Σ R_outᵀ τ_A R_in over the layer pairs of each target layer; also the maps used,
    keyed by (source key, target key)."""
    deltas: dict[Key, torch.Tensor] = {}
    maps: dict[tuple[Key, Key], PairMaps] = {}
    for pair in pairs:
        tau_a = tv.deltas[pair.source]
        m = pair_maps(mode, stats, pair, tau_a.shape, target_shapes[pair.target])
        moved = alpha * (m.r_out.T @ tau_a.double() @ m.r_in)
        deltas[pair.target] = deltas[pair.target] + moved if pair.target in deltas else moved
        maps[(pair.source, pair.target)] = m
    return TaskVector(target_type, {k: d.float() for k, d in deltas.items()}, tv.rank * fan_in(pairs)), maps
