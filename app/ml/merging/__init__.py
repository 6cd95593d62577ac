"""Merging task vectors: several learnwares of one base into one multi-task model.

Methods, by name in `METHODS` (see `registry.py`; each declares its parameters as data):
`task_arithmetic`, `ties`, `dare`, `tsv_m`, `iso_c`, `iso_cts`. PACT is a filter in front of any
of them (`pact=True` and the `pact_*` parameters).

Choices this package makes (ALGORITHMS.md §2 leaves them open):
- Tensors a method does not cover: the SVD methods (TSV-M, Iso-C, Iso-CTS) run on 2-D tensors
  only; 1-D tensors (biases, LayerNorm) and tensors of other ranks get θ0 + mean_t(τ_t), i.e.
  Task Arithmetic with λ = 1/T, as in the TSV-M and Iso-C reference code. Task Arithmetic, TIES
  and DARE are elementwise and run on every floating tensor. PACT filters 2-D tensors whose name
  matches `pact_layers`.
- Non-float tensors (e.g. position ids) and tensors no fine-tuned model changed are copied from
  the base unchanged.
- Numerical rank: singular values ≤ 1e-4·σ_max count as zero (`methods.RANK_RTOL`); Iso-C's mean
  runs over the numerical rank of Σ_t τ_t, Iso-CTS's fractions are of that rank, TSV-M and PACT
  cap each task's k at τ_t's numerical rank. For full-rank updates this changes nothing; for
  LoRA updates it keeps rounding noise out and makes the dense and low-rank paths agree.
- Precision: arithmetic in float32, SVDs and projections in float64, results in the base's dtype.
- Randomness: DARE's masks and PACT's randomized SVD are seeded per tensor from the `seed`
  parameter and the tensor's name, so results do not depend on visiting order.

Drivers: `merge_state_dicts` / `merge_into_safetensors` stream full models tensor by tensor from
`TensorSource`s; `merge_lora` merges LoRA learnwares in factor space (`lowrank.py`).
The benchmarks that drive these methods live in `app/bench/` (`pavedock bench merge`, `pact-sweep`).
"""

from app.ml.adapters import LoraDelta
from app.ml.merging.driver import (
    LoraInput,
    MergeStats,
    apply_updates,
    as_lora_delta,
    dense_update,
    merge_into_safetensors,
    merge_lora,
    merge_state_dicts,
    stream_merge,
)
from app.ml.merging.lowrank import factor_svd
from app.ml.merging.methods import (
    RANK_RTOL,
    merge_dare,
    merge_iso_c,
    merge_iso_cts,
    merge_task_arithmetic,
    merge_ties,
    merge_tsv_m,
)
from app.ml.merging.pact import PactConfig, pact_filter, pact_shields
from app.ml.merging.registry import (
    METHODS,
    PACT_PARAMS,
    MergeMethod,
    get_method,
    merge_tensor,
    method_help,
    methods_markdown,
    params_json_schema,
)
from app.ml.merging.sources import (
    DictSink,
    DictSource,
    SafetensorsSink,
    SafetensorsSource,
    TensorSink,
    TensorSource,
)
from app.ml.params import ParamSpec, ResolvedParams
from app.ml.progress import Progress

__all__ = [
    "METHODS",
    "PACT_PARAMS",
    "RANK_RTOL",
    "DictSink",
    "DictSource",
    "LoraDelta",
    "LoraInput",
    "MergeMethod",
    "MergeStats",
    "PactConfig",
    "ParamSpec",
    "Progress",
    "ResolvedParams",
    "SafetensorsSink",
    "SafetensorsSource",
    "TensorSink",
    "TensorSource",
    "apply_updates",
    "as_lora_delta",
    "dense_update",
    "factor_svd",
    "get_method",
    "merge_dare",
    "merge_into_safetensors",
    "merge_iso_c",
    "merge_iso_cts",
    "merge_lora",
    "merge_state_dicts",
    "merge_task_arithmetic",
    "merge_tensor",
    "merge_ties",
    "merge_tsv_m",
    "method_help",
    "methods_markdown",
    "pact_filter",
    "pact_shields",
    "params_json_schema",
    "stream_merge",
]
