"""Learnware runners: run a checked package on texts without executing any uploaded code.

One runner per package format, behind one registry keyed by the manifest's ``model_format``:

- ``peft-lora``: the registered base with the LoRA adapter and the label-name head;
- ``hf-seqcls``: a built-in transformers sequence-classification model (safetensors);
- ``onnx``: an ONNX classifier on raw strings through onnxruntime;
- ``pooled-linear``: the registered base, a linear map after its pooling, the label-name head.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from app.ml.packages import LearnwarePackage, ModelFormat
from app.ml.runners.base import Predictions, Runner
from app.ml.runners.hf_seqcls import HfSeqClsRunner
from app.ml.runners.onnx_model import OnnxRunner
from app.ml.runners.peft_lora import PeftLoraRunner
from app.ml.runners.pooled_linear import PooledLinearRunner

RunnerFactory = Callable[[LearnwarePackage, torch.device | None, int], Runner]

RUNNERS: dict[ModelFormat, RunnerFactory] = {
    "peft-lora": lambda package, device, max_tokens: PeftLoraRunner(package, device, max_tokens),
    "hf-seqcls": lambda package, device, max_tokens: HfSeqClsRunner(package, device, max_tokens),
    "onnx": lambda package, device, max_tokens: OnnxRunner(package),
    "pooled-linear": lambda package, device, max_tokens: PooledLinearRunner(package, device, max_tokens),
}


def load_runner(
    package: LearnwarePackage, *, device: torch.device | None = None, max_tokens: int = 128
) -> Runner:
    """The runner of ``package``'s format; raises InvalidPackage when the model cannot run."""
    return RUNNERS[package.manifest.model_format](package, device, max_tokens)


__all__ = [
    "RUNNERS",
    "HfSeqClsRunner",
    "OnnxRunner",
    "PeftLoraRunner",
    "PooledLinearRunner",
    "Predictions",
    "Runner",
    "load_runner",
]
