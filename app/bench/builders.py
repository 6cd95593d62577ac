"""Trainers that make real learnwares of three families from a TextTask.

They serve the identification benchmark, ``pavedock demo`` and the tests. Each writes a
package zip (manifest + model + ``inputs.jsonl`` with up to 256 of its training inputs) and
returns its path. Same task, options and seed: same predictions (and, on one machine, the
same zip bytes).

- :func:`train_lora_learnware`: a LoRA adapter (r = 8 on the attention query/value) of a
  registered base, trained with the label-name head (``peft-lora``);
- :func:`train_linear_head_learnware`: logistic regression on the frozen base's (standardised)
  pooler output, written into a BertForSequenceClassification's ``classifier`` (``hf-seqcls``);
- :func:`train_tfidf_onnx_learnware`: TF-IDF + logistic regression exported with skl2onnx
  (``onnx``), a model that is not a transformer.

``corrupt`` is the share of training labels replaced by a random *different* label (a random
label would keep the right one 1/C of the time; for binary tasks "different" means flipped),
so that ``corrupt=0.8`` gives a model clearly worse than its clean twin.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import cast

import numpy as np
import onnx
import torch
from skl2onnx import convert_sklearn
from skl2onnx.common.data_types import StringTensorType
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import Pipeline
from threadpoolctl import threadpool_limits
from transformers import (
    AutoModel,
    AutoTokenizer,
    BertForSequenceClassification,
    BertModel,
    PreTrainedTokenizerBase,
)

from app.ml.bases import registered_bases, resolve_base
from app.ml.data import TextTask
from app.ml.encoders import configure_threads, default_device, token_batches
from app.ml.errors import InvalidInput
from app.ml.finetune import LoraClassifier
from app.ml.head import check_label_names
from app.ml.packages import Manifest, build_package, files_under, inputs_jsonl
from app.ml.packaging import ONNX_LOCALE
from app.ml.progress import Progress

DEFAULT_BASE = "all-MiniLM-L6-v2"
DECLARED_INPUTS = 256
INPUTS_NAME = "inputs.jsonl"
# ASCII word tokens of 2+ characters: onnxruntime's Tokenizer (re2) matches it exactly as
# Python's re does, so the exported model reproduces scikit-learn's probabilities.
TOKEN_PATTERN = r"[a-zA-Z0-9_]{2,}"


def corrupt_labels(labels: np.ndarray, share: float, num_classes: int, seed: int) -> np.ndarray:
    """Replace ``share`` of the labels, chosen at random, by a random different class."""
    if not 0.0 <= share <= 1.0:
        raise InvalidInput(f"corrupt must be within [0, 1], got {share}")
    out = np.asarray(labels, dtype=np.int64).copy()
    n = round(share * len(out))
    if n == 0:
        return out
    rng = np.random.default_rng([seed, 7919])
    idx = rng.choice(len(out), size=n, replace=False)
    out[idx] = (out[idx] + rng.integers(1, num_classes, size=n)) % num_classes
    return out


def _check_task(task: TextTask) -> list[str]:
    names = check_label_names(task.label_names)
    if len(task) == 0:
        raise InvalidInput(f"task {task.name!r} has no examples")
    bad = task.labels[(task.labels < 0) | (task.labels >= len(names))]
    if bad.size:
        raise InvalidInput(f"task {task.name!r} has label {int(bad[0])} outside its {len(names)} names")
    return names


def _training_view(task: TextTask, corrupt: float, seed: int, max_examples: int | None) -> TextTask:
    """A seeded subset of at most ``max_examples``, with labels corrupted as asked."""
    if max_examples is not None and len(task) > max_examples:
        rng = np.random.default_rng([seed, 104729])
        task = task.subset(np.sort(rng.choice(len(task), size=max_examples, replace=False)))
    labels = corrupt_labels(task.labels, corrupt, len(task.label_names), seed)
    return TextTask(task.name, task.split, task.texts, labels, task.label_names)


def declared_inputs(task: TextTask, seed: int, limit: int = DECLARED_INPUTS) -> list[str]:
    """Up to ``limit`` training inputs, a seeded sample in their original order."""
    if len(task) <= limit:
        return list(task.texts)
    rng = np.random.default_rng([seed, 15485863])
    return [task.texts[i] for i in np.sort(rng.choice(len(task), size=limit, replace=False))]


def _default_name(task: TextTask, family: str, corrupt: float, seed: int) -> str:
    quality = f"corrupt{round(corrupt * 100)}" if corrupt > 0 else "good"
    return f"{task.name}-{family}-{quality}-s{seed}"


def _describe(what: str, task: TextTask, corrupt: float) -> str:
    noise = f", {corrupt:.0%} of training labels replaced by wrong ones" if corrupt > 0 else ""
    return f"{what}, trained on {len(task)} examples of {task.name}{noise}."


def _package(
    out_zip: Path,
    name: str,
    manifest: dict[str, object],
    files: dict[str, Path | bytes],
    inputs: list[str],
) -> Path:
    full = Manifest.model_validate({**manifest, "name": name, "inputs": INPUTS_NAME})
    return build_package(out_zip, full, {**files, INPUTS_NAME: inputs_jsonl(inputs)})


# --- LoRA adapter with the label-name head ------------------------------------------------------


def train_lora_learnware(
    task: TextTask,
    out_zip: Path,
    *,
    base: str = DEFAULT_BASE,
    steps: int = 120,
    seed: int = 0,
    corrupt: float = 0.0,
    rank: int = 8,
    alpha: float = 16.0,
    lr: float = 1e-3,
    batch_size: int = 16,
    max_tokens: int = 128,
    n_inputs: int = DECLARED_INPUTS,
    name: str | None = None,
    license: str = "Apache-2.0",
    progress: Progress | None = None,
) -> Path:
    """Train a LoRA adapter (query/value) of ``base`` with AdamW through the label-name head.

    Uses the dock's one LoRA training loop (``LoraClassifier``). ``base`` must be a registered
    alias: the package names its base by alias.
    """
    names = _check_task(task)
    if base not in registered_bases():
        raise InvalidInput(f"base {base!r} is not a registered alias: {', '.join(registered_bases())}")
    if steps < 1:
        raise InvalidInput(f"steps must be at least 1, got {steps}")
    train = _training_view(task, corrupt, seed, None)
    classifier = LoraClassifier.new(base, rank=rank, alpha=alpha, seed=seed)
    classifier.max_tokens = max_tokens
    classifier.fit(
        train.texts,
        train.labels,
        names,
        steps=steps,
        lr=lr,
        batch_size=batch_size,
        seed=seed,
        progress=progress,
    )
    with tempfile.TemporaryDirectory() as tmp:
        adapter = classifier.save(Path(tmp) / "adapter")
        # The adapter names its base by alias, not by this machine's path; no model card.
        config_path = adapter / "adapter_config.json"
        config = json.loads(config_path.read_text())
        config["base_model_name_or_path"] = base
        config_path.write_text(json.dumps(config, indent=2, sort_keys=True))
        files: dict[str, Path | bytes] = {
            f"adapter/{n}": adapter / n for n in ("adapter_config.json", "adapter_model.safetensors")
        }
        targets = "/".join(sorted(config.get("target_modules") or []))
        manifest: dict[str, object] = {
            "description": _describe(
                f"LoRA adapter (r={rank}, {targets}) of {base} with the label-name head, {steps} AdamW steps",
                train,
                corrupt,
            ),
            "tags": [task.name, "lora"],
            "label_names": names,
            "model_format": "peft-lora",
            "base_model": base,
            "license": license,
        }
        return _package(
            out_zip,
            name or _default_name(task, "lora", corrupt, seed),
            manifest,
            files,
            declared_inputs(task, seed, n_inputs),
        )


# --- linear head on the frozen base, as a transformers sequence classifier ----------------------


@torch.no_grad()
def pooler_features(
    model: BertForSequenceClassification,
    tokenizer: PreTrainedTokenizerBase,
    texts: list[str],
    *,
    batch_size: int = 64,
    max_tokens: int = 128,
) -> np.ndarray:
    """The pooler output the classifier reads (dropout is off in eval mode), float64 (N, hidden)."""
    device = next(model.parameters()).device
    out = np.empty((len(texts), model.config.hidden_size), dtype=np.float64)
    for batch in token_batches(tokenizer, texts, batch_size=batch_size, max_tokens=max_tokens, device=device):
        out[batch.indices] = model.bert(**batch.inputs).pooler_output.double().cpu().numpy()
    return out


def fit_logistic_head(
    features: np.ndarray, labels: np.ndarray, num_classes: int, c: float = 0.1
) -> tuple[np.ndarray, np.ndarray]:
    """Multinomial logistic regression on standardised features, as (weight C×d, bias C) on the
    raw features: softmax(weight·x + bias) gives its probabilities.

    Standardising matters here: pooler outputs have small, uneven scales, and unscaled
    regression underfits (on sst2, trec and sms_spam, standardised with C = 0.1 matched or beat
    every unscaled C). Classes absent from ``labels`` get a zero row and a very negative bias.
    """
    mean = features.mean(axis=0)
    scale = np.maximum(features.std(axis=0), 1e-6)
    with threadpool_limits(limits=1):  # one BLAS thread: fast on small problems, reproducible
        clf = LogisticRegression(C=c, max_iter=2000).fit((features - mean) / scale, labels)
    coef = clf.coef_ / scale
    intercept = clf.intercept_ - coef @ mean
    weight = np.zeros((num_classes, features.shape[1]), dtype=np.float64)
    bias = np.full(num_classes, -30.0, dtype=np.float64)
    classes = clf.classes_.astype(np.int64)
    if len(classes) == 2:
        # sklearn keeps one row w for two classes: softmax([0, w·x + b]) = sigmoid(w·x + b).
        bias[classes] = [0.0, float(intercept[0])]
        weight[classes[1]] = coef[0]
    else:
        weight[classes] = coef
        bias[classes] = intercept
    return weight, bias


def train_linear_head_learnware(
    task: TextTask,
    out_zip: Path,
    *,
    base: str = DEFAULT_BASE,
    seed: int = 0,
    corrupt: float = 0.0,
    max_examples: int | None = 4000,
    c: float = 0.1,
    max_tokens: int = 128,
    n_inputs: int = DECLARED_INPUTS,
    name: str | None = None,
    license: str = "Apache-2.0",
) -> Path:
    """Logistic regression on the frozen base's pooler output, saved as a BertForSequenceClassification."""
    names = _check_task(task)
    train = _training_view(task, corrupt, seed, max_examples)
    path = resolve_base(base)
    configure_threads()
    torch.manual_seed(seed)
    # The base checkpoint has no classifier: loading it as a sequence classifier would make a
    # random head (and transformers report it as "MISSING … newly initialized"). The head is
    # set from the regression below, so load the encoder alone and put a head on it.
    encoder = AutoModel.from_pretrained(
        path, trust_remote_code=False, use_safetensors=True, local_files_only=True
    )
    if not isinstance(encoder, BertModel):
        raise InvalidInput(
            f"a linear-head learnware needs a BERT base, {base!r} is {encoder.config.model_type!r}"
        )
    config = encoder.config
    config.num_labels = len(names)
    config.id2label = dict(enumerate(names))
    config.label2id = {n: i for i, n in enumerate(names)}
    model = BertForSequenceClassification(config)
    model.bert = encoder
    cast(torch.nn.Module, model).to(default_device()).eval()
    tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=False, local_files_only=True)
    features = pooler_features(model, tokenizer, train.texts, max_tokens=max_tokens)
    weight, bias = fit_logistic_head(features, train.labels, len(names), c)
    with torch.no_grad():
        model.classifier.weight.copy_(torch.from_numpy(weight).float())
        model.classifier.bias.copy_(torch.from_numpy(bias).float())
    model.config.problem_type = "single_label_classification"
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "model"
        model.cpu().save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        manifest: dict[str, object] = {
            "description": _describe(
                f"Logistic regression on the frozen pooler output of {base} (BertForSequenceClassification)",
                train,
                corrupt,
            ),
            "tags": [task.name, "linear-head"],
            "label_names": names,
            "model_format": "hf-seqcls",
            "base_model": base,
            "license": license,
        }
        return _package(
            out_zip,
            name or _default_name(task, "linear", corrupt, seed),
            manifest,
            dict(files_under(folder, "model")),
            declared_inputs(task, seed, n_inputs),
        )


# --- TF-IDF + logistic regression as ONNX -------------------------------------------------------


def fit_tfidf_pipeline(texts: list[str], labels: np.ndarray, c: float = 10.0) -> Pipeline:
    """Word uni- and bigram TF-IDF and logistic regression, in a form skl2onnx exports exactly."""
    pipeline = Pipeline(
        [
            (
                "tfidf",
                TfidfVectorizer(
                    ngram_range=(1, 2), min_df=2, max_features=50_000, token_pattern=TOKEN_PATTERN
                ),
            ),
            ("clf", LogisticRegression(C=c, max_iter=2000)),
        ]
    )
    with threadpool_limits(limits=1):  # one BLAS thread: fast on small problems, reproducible
        return pipeline.fit(texts, labels)


def export_onnx(pipeline: Pipeline, *, zipmap: bool = False) -> bytes:
    """The pipeline as ONNX bytes: string input ``text`` [N, 1]; label and probability outputs."""
    tfidf, clf = pipeline.named_steps["tfidf"], pipeline.named_steps["clf"]
    model = convert_sklearn(
        pipeline,
        initial_types=[("text", StringTensorType([None, 1]))],
        options={id(tfidf): {"tokenexp": TOKEN_PATTERN, "locale": ONNX_LOCALE}, id(clf): {"zipmap": zipmap}},
    )
    assert isinstance(model, onnx.ModelProto)
    model.graph.name = "tfidf_logistic_regression"  # skl2onnx names graphs with a random uuid
    return model.SerializeToString()


def train_tfidf_onnx_learnware(
    task: TextTask,
    out_zip: Path,
    *,
    seed: int = 0,
    corrupt: float = 0.0,
    zipmap: bool = False,
    max_examples: int | None = 20_000,
    c: float = 10.0,
    n_inputs: int = DECLARED_INPUTS,
    name: str | None = None,
    license: str = "Apache-2.0",
) -> Path:
    """TF-IDF + logistic regression, exported to ONNX (with or without a ZipMap output)."""
    names = _check_task(task)
    train = _training_view(task, corrupt, seed, max_examples)
    pipeline = fit_tfidf_pipeline(train.texts, train.labels, c)
    manifest: dict[str, object] = {
        "description": _describe("TF-IDF (word 1-2 grams) + logistic regression, ONNX", train, corrupt),
        "tags": [task.name, "tfidf"],
        "label_names": names,
        "model_format": "onnx",
        "license": license,
    }
    return _package(
        out_zip,
        name or _default_name(task, "tfidf", corrupt, seed),
        manifest,
        {"model.onnx": export_onnx(pipeline, zipmap=zipmap)},
        declared_inputs(task, seed, n_inputs),
    )
