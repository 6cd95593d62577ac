"""Full fine-tuning of a base with the label-name head: every weight of the encoder trained.

The LoRA trainer (`finetune.py`) moves two small factors per attention matrix; this one moves
every tensor (embeddings, attention, feed-forward, norms), which is what a full fine-tune of the
base is and what the merging literature's task vectors are. The head stays the parameter-free
label-name head, its class embeddings taken from the base before training, so a fine-tune's
task vector θ_t − θ0 lives in the encoder alone and any fine-tune serves any label set by names.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from app.ml.encoders import Encoder, check_texts, mean_pool
from app.ml.errors import InvalidInput
from app.ml.head import LabelNameHead
from app.ml.progress import Progress


def fit_full(
    encoder: Encoder,
    texts: Sequence[str],
    labels: Sequence[int] | np.ndarray,
    label_names: Sequence[str],
    *,
    steps: int,
    lr: float = 5e-5,
    batch_size: int = 16,
    max_tokens: int = 128,
    seed: int = 0,
    temperature: float = 0.05,
    progress: Progress | None = None,
) -> list[float]:
    """Train every parameter of ``encoder.model`` in place (AdamW, cross-entropy through the
    label-name head embedded by the untrained encoder); returns the loss of each step. A BERT's
    pooler, which mean pooling never reads, gets no gradient and stays as it was.

    Pass a private copy (``load_encoder(..., fresh=True)``): the shared one is the base.
    """
    texts = check_texts(texts)
    y = torch.as_tensor(np.asarray(labels), dtype=torch.long)
    if steps < 1:
        raise InvalidInput(f"steps must be at least 1, got {steps}")
    head = LabelNameHead.from_names(encoder, label_names, temperature)  # before any step: θ0's names
    if y.numel() != len(texts) or y.min() < 0 or y.max() >= len(head):
        raise InvalidInput("labels must be one id in [0, number of label names) per text")
    model = encoder.model
    params = list(model.parameters())
    for param in params:
        param.requires_grad_(True)
    optimizer = torch.optim.AdamW(params, lr=lr)
    generator = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)  # dropout
    model.train()
    losses: list[float] = []
    order, cursor = torch.randperm(len(texts), generator=generator), 0
    try:
        for step in range(steps):
            if cursor >= len(order):
                order, cursor = torch.randperm(len(texts), generator=generator), 0
            idx = order[cursor : cursor + batch_size]
            cursor += batch_size
            inputs = encoder.tokenizer(
                [texts[i] for i in idx.tolist()],
                padding="longest",
                truncation=True,
                max_length=max_tokens,
                return_tensors="pt",
            ).to(encoder.device)
            hidden = model(**inputs).last_hidden_state
            logits = head.logits(mean_pool(hidden, inputs["attention_mask"]))
            loss = torch.nn.functional.cross_entropy(logits, y[idx].to(encoder.device))
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            losses.append(float(loss.item()))
            if progress:
                progress(step + 1, steps, f"loss {loss.item():.3f}")
    finally:
        model.eval()
        for param in params:
            param.requires_grad_(False)
    return losses
