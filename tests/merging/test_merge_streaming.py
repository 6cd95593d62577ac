"""The streaming driver over real safetensors files of a tiny BERT built here (never downloaded)."""

from __future__ import annotations

import weakref
from pathlib import Path
from typing import ClassVar

import pytest
import torch
from safetensors.torch import load_file, save_file
from torch import Tensor
from transformers import BertConfig, BertModel

from app.ml.errors import InvalidInput
from app.ml.merging import (
    DictSource,
    SafetensorsSink,
    SafetensorsSource,
    merge_into_safetensors,
    merge_state_dicts,
    merge_tensor,
    stream_merge,
)
from app.ml.merging.sources import DictSink

CONFIG = BertConfig(
    vocab_size=64, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32
)
FROZEN = "embeddings.token_type_embeddings.weight"


def _state_dict(model: BertModel) -> dict[str, Tensor]:
    return {name: tensor.detach().clone().contiguous() for name, tensor in model.state_dict().items()}


@pytest.fixture
def bert_files(tmp_path: Path) -> tuple[Path, list[Path]]:
    """A tiny BERT base and three full fine-tunes of it (every tensor but one moved), as safetensors."""
    torch.manual_seed(0)
    base = _state_dict(BertModel(CONFIG))
    save_file(base, str(tmp_path / "base.safetensors"))
    generator = torch.Generator().manual_seed(1)
    paths = []
    for index in range(3):
        tuned = {
            name: tensor
            if name == FROZEN or not tensor.is_floating_point()
            else tensor + 0.02 * torch.randn(tensor.shape, generator=generator)
            for name, tensor in base.items()
        }
        tuned["classifier.weight"] = torch.randn(2, 16, generator=generator)
        path = tmp_path / f"task{index}.safetensors"
        save_file(tuned, str(path))
        paths.append(path)
    return tmp_path / "base.safetensors", paths


@pytest.mark.parametrize(
    ("method", "params"),
    [
        ("task_arithmetic", {"lam": 0.4}),
        ("ties", {}),
        ("dare", {"seed": 2}),
        ("iso_c", {"pact": True}),
        ("iso_cts", {}),
    ],
)
def test_streaming_merge_equals_tensor_by_tensor_merge(
    bert_files: tuple[Path, list[Path]], method: str, params: dict[str, object]
) -> None:
    base_path, paths = bert_files
    base = load_file(str(base_path))
    tuned = [load_file(str(path)) for path in paths]
    calls: list[tuple[int, int, str]] = []
    merged = merge_state_dicts(
        SafetensorsSource(base_path),
        [SafetensorsSource(path) for path in paths],
        method,
        params,
        progress=lambda done, total, message: calls.append((done, total, message)),
    )
    assert list(merged) == list(base)
    for name, weight in base.items():
        expected = merge_tensor(name, weight, [model[name] for model in tuned], method, params)
        assert torch.equal(merged[name], expected), name
    assert torch.equal(merged[FROZEN], base[FROZEN])
    assert [done for done, _, _ in calls] == list(range(1, len(base) + 1))
    assert {total for _, total, _ in calls} == {len(base)}


def test_merged_file_loads_into_the_model(bert_files: tuple[Path, list[Path]], tmp_path: Path) -> None:
    base_path, paths = bert_files
    out = tmp_path / "merged.safetensors"
    stats = merge_into_safetensors(
        SafetensorsSource(base_path),
        [SafetensorsSource(path) for path in paths],
        "tsv_m",
        {},
        out,
        metadata={"m": "1"},
    )
    in_memory = merge_state_dicts(
        SafetensorsSource(base_path), [SafetensorsSource(path) for path in paths], "tsv_m"
    )
    on_disk = load_file(str(out))
    assert set(on_disk) == set(in_memory)
    assert all(torch.equal(on_disk[name], in_memory[name]) for name in in_memory)
    assert stats.tensors == len(in_memory) and stats.unchanged >= 1 and stats.averaged >= 1
    model = BertModel(CONFIG)
    model.load_state_dict(on_disk)
    hidden = model(input_ids=torch.tensor([[1, 5, 9, 2]])).last_hidden_state
    assert torch.isfinite(hidden).all()
    assert not list(tmp_path.glob("*.partial"))


class CountingSource(SafetensorsSource):
    """A real safetensors source that records its reads and how many of its tensors are alive."""

    live = 0
    most_live = 0
    reads: ClassVar[list[tuple[int, str]]] = []

    def __init__(self, path: Path, index: int) -> None:
        super().__init__(path)
        self.index = index

    def get(self, name: str) -> Tensor:
        tensor = super().get(name)
        CountingSource.reads.append((self.index, name))
        CountingSource.live += 1
        CountingSource.most_live = max(CountingSource.most_live, CountingSource.live)
        weakref.finalize(tensor, CountingSource._released)
        return tensor

    @staticmethod
    def _released() -> None:
        CountingSource.live -= 1


@pytest.mark.parametrize("method", ["task_arithmetic", "ties", "tsv_m", "iso_cts"])
def test_tensors_stream_one_at_a_time(bert_files: tuple[Path, list[Path]], method: str) -> None:
    base_path, paths = bert_files
    CountingSource.reads.clear()
    CountingSource.live = CountingSource.most_live = 0
    four_models = [CountingSource(path, i) for i, path in enumerate([*paths, paths[0]])]
    merged = merge_state_dicts(SafetensorsSource(base_path), four_models, method, {"pact": True})
    names = list(merged)
    blocks = [
        name
        for i, (_, name) in enumerate(CountingSource.reads)
        if i == 0 or CountingSource.reads[i - 1][1] != name
    ]
    assert blocks == names, "each tensor is read in one contiguous block, in the base's order"
    assert CountingSource.most_live <= 2, "at most two fine-tuned tensors are alive at once, not T = 4"


def test_shape_mismatch_is_named(bert_files: tuple[Path, list[Path]]) -> None:
    base_path, paths = bert_files
    bad = load_file(str(paths[0]))
    bad["pooler.dense.weight"] = torch.zeros(8, 16)
    with pytest.raises(
        InvalidInput,
        match=r"pooler\.dense\.weight: fine-tuned model 1 has shape \(8, 16\) but the base has \(16, 16\)",
    ):
        merge_state_dicts(
            SafetensorsSource(base_path), [SafetensorsSource(paths[1]), DictSource(bad)], "iso_c"
        )


def test_missing_tensors_are_named(bert_files: tuple[Path, list[Path]]) -> None:
    base_path, paths = bert_files
    partial = load_file(str(paths[0]))
    del partial["pooler.dense.bias"]
    with pytest.raises(
        InvalidInput, match=r"fine-tuned model 0 lacks 1 tensor\(s\) of the base: pooler\.dense\.bias"
    ):
        merge_state_dicts(SafetensorsSource(base_path), [DictSource(partial)], "ties")


def test_no_finetuned_models_is_refused(bert_files: tuple[Path, list[Path]]) -> None:
    with pytest.raises(InvalidInput, match="no fine-tuned models"):
        merge_state_dicts(SafetensorsSource(bert_files[0]), [], "iso_c")


def test_base_dtype_is_kept(tmp_path: Path) -> None:
    generator = torch.Generator().manual_seed(0)
    base = {"w": torch.randn(6, 5, generator=generator).to(torch.bfloat16), "ids": torch.arange(5)}
    tuned = [
        {
            "w": (base["w"].float() + torch.randn(6, 5, generator=generator)).to(torch.bfloat16),
            "ids": base["ids"],
        }
    ]
    sink = DictSink()
    stream_merge(DictSource(base), [DictSource(model) for model in tuned], "iso_c", None, sink)
    assert sink.tensors["w"].dtype == torch.bfloat16
    assert torch.equal(sink.tensors["ids"], base["ids"])


def test_directory_of_shards_is_one_source(tmp_path: Path) -> None:
    save_file({"a": torch.ones(2, 2)}, str(tmp_path / "model-00001-of-00002.safetensors"))
    save_file({"b": torch.zeros(3)}, str(tmp_path / "model-00002-of-00002.safetensors"))
    source = SafetensorsSource(tmp_path)
    assert source.keys() == ["a", "b"]
    assert torch.equal(source.get("b"), torch.zeros(3))
    with pytest.raises(InvalidInput, match="no tensor 'c'"):
        source.get("c")
    with pytest.raises(InvalidInput, match="no safetensors file"):
        SafetensorsSource(tmp_path / "missing")


def test_sink_refuses_a_name_twice_and_cleans_up_on_error(tmp_path: Path) -> None:
    out = tmp_path / "x.safetensors"
    with pytest.raises(InvalidInput, match="written twice"), SafetensorsSink(out) as sink:
        sink.write("a", torch.ones(2))
        sink.write("a", torch.ones(2))
    assert not out.exists() and not list(tmp_path.iterdir())
