"""PAVE specifications: the LoRA-B matrices of a spec space fitted to a model or a task.

- A **model vector** is fitted to a learnware's own predictions h(x) (hard labels, or its
  probabilities with a soft cross-entropy), so the learnware's quality is written into it.
- A **task vector** is fitted to a user's few labelled examples.

Two recipes (``FitRecipe.steps``):

- ``steps = 0``: one backward pass at B = 0. With ``balanced`` (the default) the residual of
  each example is (u − y) instead of (p − y) (u uniform over the classes: this drops the part
  of the gradient that does not depend on the targets), every example is weighted by
  1/(examples of its class), and the spec is −sign(∇B), which is what one Adam step from B = 0
  would give. Without ``balanced`` it is the plain −∇B of the cross-entropy.
- ``steps > 0``: that many AdamW steps on B only (class-balanced cross-entropy when
  ``balanced``), A frozen and shared.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
import torch.nn.functional as F
from safetensors import SafetensorError
from safetensors.numpy import load_file, save_file

from app.ml.binary_index import FLOAT32, SIGN_BITS
from app.ml.encoders import TokenBatch, check_texts, mean_pool, run_batches, token_batches
from app.ml.errors import IncompatibleSpec, InvalidInput
from app.ml.head import LabelNameHead, check_label_names
from app.ml.progress import Progress
from app.ml.safetensors_header import read_safetensors_header
from app.ml.spec_space import FitRecipe, SpecSpace, check_vector

SpecKind = Literal["model", "task"]


@dataclass
class PaveSpec:
    """A PAVE vector with the id of its space and how it was made."""

    space_id: str
    vector: np.ndarray
    kind: SpecKind
    meta: dict[str, Any] = field(default_factory=dict)

    def save(self, path: Path) -> tuple[Path, Path]:
        """Write ``<path>.safetensors`` (the vector) and ``<path>.json`` (space id, kind, meta)."""
        path = Path(path)
        tensors, meta = path.with_suffix(".safetensors"), path.with_suffix(".json")
        save_file(
            {"pave": self.vector.astype(np.float32)}, str(tensors), metadata={"space_id": self.space_id}
        )
        meta.write_text(
            json.dumps({"space_id": self.space_id, "kind": self.kind, "meta": self.meta}, indent=2)
        )
        return tensors, meta

    @classmethod
    def load(cls, path: Path) -> PaveSpec:
        path = Path(path)
        try:
            # The header first: a declared shape its bytes do not hold is refused in words, not
            # left to the loader's 64-bit arithmetic.
            read_safetensors_header(path.with_suffix(".safetensors"), f"spec {path}", error=IncompatibleSpec)
            arrays = load_file(str(path.with_suffix(".safetensors")))
            info = json.loads(path.with_suffix(".json").read_text())
        except (OSError, ValueError, SafetensorError) as exc:
            raise IncompatibleSpec(f"cannot read spec at {path}: {exc}") from exc
        if "pave" not in arrays:
            raise IncompatibleSpec(f"{path} holds no 'pave' tensor")
        return cls(
            space_id=str(info["space_id"]),
            vector=arrays["pave"],
            kind=info["kind"],
            meta=info.get("meta", {}),
        )


def _check_targets(
    targets: np.ndarray | Sequence[int], n: int, num_classes: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (soft targets N×C, hard class per example). Refuses unknown labels and one class."""
    arr = np.asarray(targets)
    if arr.shape[0] != n:
        raise InvalidInput(f"{arr.shape[0]} targets for {n} texts")
    if arr.ndim == 1:
        if not np.issubdtype(arr.dtype, np.integer):
            raise InvalidInput(f"hard targets must be integer class ids, got dtype {arr.dtype}")
        bad = arr[(arr < 0) | (arr >= num_classes)]
        if bad.size:
            raise InvalidInput(f"label {int(bad[0])} is not among the {num_classes} label names")
        hard = torch.from_numpy(arr.astype(np.int64))
        soft = F.one_hot(hard, num_classes).float()
    elif arr.ndim == 2:
        if arr.shape[1] != num_classes:
            raise InvalidInput(f"probabilities have {arr.shape[1]} columns for {num_classes} label names")
        if not np.all(np.isfinite(arr)) or np.any(arr < 0):
            raise InvalidInput("probabilities must be finite and non-negative")
        soft = torch.from_numpy(arr.astype(np.float32))
        soft = soft / soft.sum(dim=1, keepdim=True).clamp(min=1e-12)
        hard = soft.argmax(dim=1)
    else:
        raise InvalidInput(f"targets must be 1-D labels or 2-D probabilities, got shape {arr.shape}")
    if torch.unique(hard).numel() < 2:
        raise InvalidInput("targets cover a single class: a spec needs at least two")
    return soft, hard


def _class_weights(hard: torch.Tensor, num_classes: int) -> torch.Tensor:
    counts = torch.bincount(hard, minlength=num_classes).float()
    return 1.0 / counts[hard]


def fit_pave_spec(
    space: SpecSpace,
    texts: Sequence[str],
    targets: np.ndarray | Sequence[int],
    label_names: Sequence[str],
    *,
    kind: SpecKind,
    recipe: FitRecipe | None = None,
    progress: Progress | None = None,
) -> PaveSpec:
    """Fit B of ``space`` to (texts, targets) and return the spec.

    ``targets`` are class ids into ``label_names`` (N,) or probabilities (N, C). The recipe
    defaults to the space's own; a different recipe gives vectors of a different space.
    """
    recipe = recipe or space.config.recipe
    texts = check_texts(texts)
    names = check_label_names(label_names)
    soft, hard = _check_targets(targets, len(texts), len(names))
    started = time.perf_counter()
    with space.lock:
        space.reset()
        head = (
            _prototype_head(space, texts, soft, names, recipe)
            if recipe.head == "prototypes"
            else space.head(tuple(names))
        )
        torch.manual_seed(recipe.seed)
        if recipe.steps == 0:
            (grad,) = _one_gradient(space, texts, soft, hard, [head.logits], recipe, progress)
            vector = _spec_of_gradient(grad, recipe)
        else:
            _adam_steps(space, texts, soft, hard, head.logits, recipe, progress)
            vector = space.spec_vector()
        space.reset()
    vector = vector.astype(np.float32)
    check_vector(vector, space)
    meta = {
        "n_examples": len(texts),
        "label_names": names,
        "steps": recipe.steps,
        "balanced": recipe.balanced,
        "soft_targets": bool(np.asarray(targets).ndim == 2),
        "seconds": round(time.perf_counter() - started, 4),
    }
    return PaveSpec(space_id=space.id, vector=vector, kind=kind, meta=meta)


def _prototype_head(
    space: SpecSpace, texts: list[str], soft: torch.Tensor, names: list[str], recipe: FitRecipe
) -> LabelNameHead:
    """Class vectors from the data: each class's target-weighted mean of unit base features.

    B is zero here, so the LoRA model is the frozen base. Renaming or reordering the classes
    permutes the prototypes with the targets and leaves the spec unchanged.
    """
    device = space.encoder.device
    features = torch.empty(len(texts), space.encoder.hidden_size)
    with torch.no_grad():
        for batch in token_batches(
            space.encoder.tokenizer,
            texts,
            batch_size=max(recipe.batch_size, 64),
            max_tokens=recipe.max_tokens,
            device=device,
        ):
            features[batch.indices] = F.normalize(_features(space, batch.inputs), dim=-1).cpu()
    weights = soft / soft.sum(dim=0, keepdim=True).clamp(min=1e-12)
    return LabelNameHead(weights.T @ features, space.config.temperature, names)


def _features(space: SpecSpace, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    device = space.encoder.device
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
        hidden = space.model(**inputs).last_hidden_state
    return mean_pool(hidden.float(), inputs["attention_mask"])


def _spec_of_gradient(grad: np.ndarray, recipe: FitRecipe) -> np.ndarray:
    """The spec of a one-gradient fit: −sign(∇B) balanced (a zero gradient, rare, counts as +1,
    so the spec is a sign vector throughout), −∇B otherwise."""
    return np.where(grad > 0, -1.0, 1.0) if recipe.balanced else -grad


def _example_weights(hard: torch.Tensor, num_classes: int, recipe: FitRecipe) -> torch.Tensor:
    """Each example's weight in the one-gradient fit, summing to 1: 1 / its class's count where
    the recipe is ``balanced``, equal otherwise."""
    weights = _class_weights(hard, num_classes) if recipe.balanced else torch.ones(len(hard))
    return weights / weights.sum()


def _batches(space: SpecSpace, texts: Sequence[str], recipe: FitRecipe) -> list[TokenBatch]:
    return list(
        token_batches(
            space.encoder.tokenizer,
            texts,
            batch_size=recipe.batch_size,
            max_tokens=recipe.max_tokens,
            device=space.encoder.device,
        )
    )


def _one_gradient(
    space: SpecSpace,
    texts: list[str],
    soft: torch.Tensor,
    hard: torch.Tensor,
    heads: Sequence[Callable[[torch.Tensor], torch.Tensor]],
    recipe: FitRecipe,
    progress: Progress | None,
) -> list[np.ndarray]:
    """∇B of the (balanced) loss at B = 0 under each of ``heads`` (the same examples, classes
    named otherwise), in the space's layer order: each batch's features are computed once and
    differentiated once per head; the batches run side by side on a CPU's threads and are summed
    in a fixed order (`run_batches`)."""
    num_classes = soft.shape[1]
    weights = _example_weights(hard, num_classes, recipe)
    device = space.encoder.device
    batches = _batches(space, texts, recipe)

    def gradient(batch: TokenBatch) -> list[list[torch.Tensor]]:
        idx = torch.tensor(batch.indices)
        features = _features(space, batch.inputs)
        y = soft[idx].to(device)
        per_head = []
        for n, logits_fn in enumerate(heads):
            logits = logits_fn(features)
            if recipe.balanced:
                # ∂L/∂logits = w·(u − y): the residual against uniform, not the base's own prediction.
                residual = (torch.full_like(y, 1.0 / num_classes) - y) * weights[idx].to(device)[:, None]
            else:
                residual = (torch.softmax(logits.detach(), dim=-1) - y) * weights[idx].to(device)[:, None]
            grads = torch.autograd.grad(
                (logits * residual).sum(), space.b_params, allow_unused=True, retain_graph=n < len(heads) - 1
            )
            per_head.append(
                [torch.zeros_like(b) if g is None else g for b, g in zip(space.b_params, grads, strict=True)]
            )
        return per_head

    totals = [[torch.zeros_like(b) for b in space.b_params] for _ in heads]
    for step, (_, per_head) in enumerate(run_batches(gradient, batches, device)):
        for total, grads in zip(totals, per_head, strict=True):
            for acc, grad in zip(total, grads, strict=True):
                acc += grad
        if progress:
            progress(step + 1, len(batches), "gradient at B = 0")
    return [torch.cat([g.detach().float().reshape(-1).cpu() for g in total]).numpy() for total in totals]


def realignable(recipe: FitRecipe) -> bool:
    """Whether a spec of this recipe can be refitted under other names by `fit_realigned_specs`."""
    return recipe.steps == 0 and recipe.head != "prototypes"


def fit_realigned_specs(
    space: SpecSpace,
    texts: Sequence[str],
    labels: np.ndarray | Sequence[int],
    name_sets: Sequence[Sequence[str]],
) -> list[np.ndarray]:
    """The task spec of the same examples with the user's classes named otherwise: for each of
    ``name_sets`` (the user's label i named ``names[i]``), the vector `fit_pave_spec` would give
    under those names, from one forward pass and one backward pass per set.

    So a task whose label names no learnware uses ("0" / "1", another language) is compared with
    a learnware under the learnware's own names (`ranking.realignments`): the one-gradient
    spec depends on the names only through the head rows, and for two labels the other alignment
    is the same vector negated. Only for the space's one-gradient recipe with the label-name head
    (a prototype head does not depend on the names: there is nothing to realign)."""
    recipe = space.config.recipe
    if not realignable(recipe):
        raise InvalidInput("realigned task specs need the one-gradient recipe with the label-name head")
    texts = check_texts(texts)
    sets = [check_label_names(names) for names in name_sets]
    if not sets:
        return []
    if any(len(names) != len(sets[0]) for names in sets):
        raise InvalidInput("every realigned name set must name as many classes as the task has")
    soft, hard = _check_targets(np.asarray(labels), len(texts), len(sets[0]))
    with space.lock:
        space.reset()
        heads = [space.head(tuple(names)).logits for names in sets]
        torch.manual_seed(recipe.seed)
        grads = _one_gradient(space, texts, soft, hard, heads, recipe, None)
        space.reset()
    vectors = [_spec_of_gradient(g, recipe).astype(np.float32) for g in grads]
    for vector in vectors:
        check_vector(vector, space)
    return vectors


ALIGN_STEP = 1e-3
"""The step along a learnware's spec at which `alignment_gains` differentiates the base's features
(B = step · v, one-sided). On the identification benchmark's coded users the gains' best
alignments were the same at 1e-3 and 1e-4 one-sided and 1e-3 central (the gains' correlation
1.0000); 1e-2 already moved some."""


def alignment_gains(
    space: SpecSpace,
    texts: Sequence[str],
    labels: np.ndarray | Sequence[int],
    n_labels: int,
    learnwares: Sequence[tuple[np.ndarray, Sequence[str]]],
) -> list[np.ndarray]:
    """For each learnware (its spec vector v and label names), how much the task's spec would
    agree with v under each alignment of the task's classes with the learnware's: ``A[c, j]``,
    the gain of naming the task's class c (of ``n_labels``) as the learnware's class j.

    The one-gradient spec before its sign is −∇B = (1/τ) Σ_c G_c e_π(c) − (a term that does not
    depend on the alignment π), where G_c sums the class-balanced Jacobians of the task's class-c
    examples' normalised features with respect to B, and e_j is the head row of name j. So
    ⟨v, −∇B(π)⟩ = Σ_c A[c, π(c)] + const with A[c, j] = ⟨G_c^T v, e_j⟩ (up to 1/τ), and
    G_c^T v is the derivative of those features along v: one forward pass with B = `ALIGN_STEP` · v
    per learnware, against one at B = 0, instead of a refit per alignment. The best alignment is
    then an assignment problem (`ranking.best_alignment`). Rows of classes without examples are 0:
    the spec does not depend on where they go."""
    texts = check_texts(texts)
    _, hard = _check_targets(np.asarray(labels), len(texts), n_labels)
    recipe = space.config.recipe
    weights = _example_weights(hard, n_labels, recipe)
    one_hot = F.one_hot(hard, n_labels).float() * weights[:, None]  # N × K: each example's weight
    batches = _batches(space, texts, recipe)

    def normalised(batch: TokenBatch) -> torch.Tensor:
        with torch.no_grad():  # per thread: the batches run side by side (`run_batches`)
            return F.normalize(_features(space, batch.inputs), dim=-1).float().cpu()

    def features() -> torch.Tensor:
        out = torch.empty(len(texts), space.encoder.hidden_size)
        for batch, f in run_batches(normalised, batches, space.encoder.device):
            out[torch.tensor(batch.indices)] = f
        return out

    gains = []
    with space.lock:
        space.reset()
        base = features()
        for vector, names in learnwares:
            vector = check_vector(np.asarray(vector, dtype=np.float32), space)
            offset = 0
            with torch.no_grad():
                for b in space.b_params:
                    part = torch.from_numpy(vector[offset : offset + b.numel()]).reshape(b.shape)
                    b.copy_(part.to(b.device, b.dtype) * ALIGN_STEP)
                    offset += b.numel()
            moved = (features() - base) / ALIGN_STEP  # N × d: the features' derivative along v
            space.reset()
            heads = space.head(tuple(check_label_names(names))).embeddings.cpu()
            gains.append((one_hot.T @ moved @ heads.T).numpy().astype(np.float64))
        space.reset()
    return gains


def _adam_steps(
    space: SpecSpace,
    texts: list[str],
    soft: torch.Tensor,
    hard: torch.Tensor,
    logits_fn: Callable[[torch.Tensor], torch.Tensor],
    recipe: FitRecipe,
    progress: Progress | None,
) -> None:
    """AdamW on B only, mini-batches drawn from a seeded permutation."""
    num_classes = soft.shape[1]
    weights = _class_weights(hard, num_classes) if recipe.balanced else torch.ones(len(texts))
    optimizer = torch.optim.AdamW(space.b_params, lr=recipe.lr, weight_decay=recipe.weight_decay)
    gen = torch.Generator().manual_seed(recipe.seed)
    order = torch.randperm(len(texts), generator=gen)
    cursor = 0
    device = space.encoder.device
    tokenizer = space.encoder.tokenizer
    for step in range(recipe.steps):
        if cursor + recipe.batch_size > len(order) and cursor > 0:
            order, cursor = torch.randperm(len(texts), generator=gen), 0
        idx = order[cursor : cursor + recipe.batch_size]
        cursor += recipe.batch_size
        enc = tokenizer(
            [texts[i] for i in idx.tolist()],
            padding="longest",
            truncation=True,
            max_length=recipe.max_tokens,
            return_tensors="pt",
        )
        logits = logits_fn(_features(space, {k: v.to(device) for k, v in enc.items()}))
        y = soft[idx].to(device)
        w = weights[idx].to(device)
        loss = (-(y * torch.log_softmax(logits, dim=-1)).sum(dim=-1) * w).sum() / w.sum()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if progress:
            progress(step + 1, recipe.steps, f"AdamW step, loss {loss.item():.3f}")


@dataclass(frozen=True)
class UploadedSpec:
    """A spec read from an uploaded file: the space it claims, its vector, its metadata."""

    space_id: str | None
    vector: np.ndarray
    """float32 values, or uint8 packed sign bits (``encoding`` says which)."""
    meta: dict[str, str]
    encoding: str = FLOAT32


def read_spec_file(path: Path) -> UploadedSpec:
    """Read an uploaded spec written by ``PaveSpec.save`` (``<stem>.safetensors``: tensor ``pave``,
    the space id in its metadata). The header is parsed and checked here (declared shape against
    its bytes, in overflow-free arithmetic) before a byte of the tensor is read, never by a pickle
    or a library trusting it; the vector's shape is checked against its space by ``check_vector``."""
    header = read_safetensors_header(path, "spec file", error=IncompatibleSpec)
    tensor = header.tensors.get("pave")
    if tensor is None:
        raise IncompatibleSpec("spec file holds no 'pave' tensor")
    if tensor.dtype not in ("F32", "U8"):
        raise IncompatibleSpec(f"spec tensor has dtype {tensor.dtype}: F32 values, or U8 packed sign bits")
    with Path(path).open("rb") as fh:
        fh.seek(header.data_start + tensor.begin)
        raw = fh.read(tensor.end - tensor.begin)
    vector: np.ndarray
    if tensor.dtype == "F32":
        vector = np.frombuffer(raw, dtype="<f4").reshape(tensor.shape).astype(np.float32)
    else:  # packed sign bits, unpacked against the space by ``check_spec``
        vector = np.frombuffer(raw, dtype=np.uint8).reshape(tensor.shape).copy()
    claimed = header.metadata.get("space_id")
    return UploadedSpec(
        space_id=str(claimed) if claimed else None,
        vector=vector,
        meta={str(k): str(v) for k, v in header.metadata.items()},
        encoding=FLOAT32 if tensor.dtype == "F32" else SIGN_BITS,
    )
