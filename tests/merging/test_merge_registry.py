"""The registry: parameters as data, validated with errors that name the bad value."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from app.ml.errors import InvalidInput
from app.ml.merging import (
    METHODS,
    PACT_PARAMS,
    get_method,
    merge_lora,
    merge_tensor,
    method_help,
    methods_markdown,
    params_json_schema,
)

EXPECTED = {"task_arithmetic", "ties", "dare", "tsv_m", "iso_c", "iso_cts"}


def test_every_method_is_registered() -> None:
    assert set(METHODS) == EXPECTED


def test_unknown_method_lists_the_known_ones() -> None:
    with pytest.raises(InvalidInput, match="unknown merge method 'isoc'; known: task_arithmetic, ties, dare"):
        get_method("isoc")


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_defaults_are_valid(name: str) -> None:
    method = get_method(name)
    resolved = method.resolve(None)
    assert set(resolved) == {spec.name for spec in method.all_params}
    assert method.resolve({spec.name: spec.default for spec in method.all_params}) == resolved


@pytest.mark.parametrize(
    ("method", "params", "message"),
    [
        ("ties", {"k": 1.5}, r"ties: parameter k=1\.5 is out of range \(0, 1\]"),
        ("ties", {"k": 0.0}, r"parameter k=0\.0 is out of range \(0, 1\]"),
        ("dare", {"p": 1.0}, r"dare: parameter p=1\.0 is out of range \[0, 1\)"),
        ("dare", {"combine": "mean"}, r"combine='mean' is not one of \{task_arithmetic, ties\}"),
        ("dare", {"seed": 1.5}, r"seed=1\.5 must be an integer"),
        ("iso_c", {"alpha": "big"}, r"iso_c: parameter alpha='big' must be a number"),
        ("iso_c", {"alpha": float("nan")}, r"alpha=nan must be finite"),
        ("iso_c", {"alpha": True}, r"alpha=True must be a number"),
        ("iso_c", {"pact": 1}, r"pact=1 must be true or false"),
        ("iso_c", {"pact_side": "top"}, r"pact_side='top' is not one of \{right, left\}"),
        ("iso_c", {"pact": True, "pact_layers": "("}, r"pact_layers='\(' is not a valid regex"),
        ("tsv_m", {"lam": 0.3}, r"tsv_m: unknown parameter\(s\) lam; known: alpha, pact"),
    ],
)
def test_bad_parameters_are_named(method: str, params: dict[str, object], message: str) -> None:
    base = torch.zeros(4, 3)
    with pytest.raises(InvalidInput, match=message):
        merge_tensor("w", base, [base + 1, base - 1], method, params)


def test_integral_floats_are_accepted_for_integers() -> None:
    assert get_method("dare").resolve({"seed": 3.0}).get_int("seed") == 3


def test_json_schema_comes_from_the_declarations() -> None:
    schema = params_json_schema("ties")
    properties = schema["properties"]
    assert isinstance(properties, dict)
    assert set(properties) == {"k", "lam"} | {spec.name for spec in PACT_PARAMS}
    assert properties["k"] == {
        "description": get_method("ties").params[0].help,
        "default": 0.2,
        "type": "number",
        "exclusiveMinimum": 0.0,
        "maximum": 1.0,
    }
    assert properties["pact_side"]["enum"] == ["right", "left"]
    assert schema["additionalProperties"] is False


def test_docs_and_help_cover_every_parameter() -> None:
    markdown = methods_markdown()
    for method in METHODS.values():
        assert f"## `{method.name}`" in markdown
        help_text = method_help(method.name)
        for spec in method.all_params:
            assert f"`{spec.name}`" in markdown
            assert f"  {spec.name} (" in help_text


def test_shape_mismatch_names_the_tensor_and_both_shapes() -> None:
    with pytest.raises(
        InvalidInput, match=r"encoder\.w: fine-tuned model 1 has shape \(3, 4\) but the base has \(4, 3\)"
    ):
        merge_tensor("encoder.w", torch.zeros(4, 3), [torch.ones(4, 3), torch.ones(3, 4)], "iso_c")


def test_no_task_vectors_is_refused() -> None:
    with pytest.raises(InvalidInput, match="no task vectors"):
        merge_tensor("w", torch.zeros(4, 3), [], "task_arithmetic")
    with pytest.raises(InvalidInput, match="no learnwares"):
        merge_lora([], "iso_c")


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_method_is_deterministic(name: str) -> None:
    generator = torch.Generator().manual_seed(0)
    base = torch.randn(16, 12, generator=generator)
    finetuned = [base + 0.1 * torch.randn(16, 12, generator=generator) for _ in range(3)]
    params = {"pact": True}
    first = merge_tensor("layer.0.w", base, finetuned, name, params)
    second = merge_tensor("layer.0.w", base, finetuned, name, params)
    assert torch.equal(first, second)


def test_dare_seed_changes_the_masks() -> None:
    generator = torch.Generator().manual_seed(0)
    base = torch.randn(16, 12, generator=generator)
    finetuned = [base + torch.randn(16, 12, generator=generator) for _ in range(2)]
    seeded = [merge_tensor("w", base, finetuned, "dare", {"seed": seed}) for seed in (0, 0, 1)]
    assert torch.equal(seeded[0], seeded[1])
    assert not torch.equal(seeded[0], seeded[2])


def test_the_committed_methods_reference_is_generated_from_the_registry() -> None:
    committed = Path(__file__).parents[2] / "docs" / "merge-methods.md"
    assert committed.read_text() == methods_markdown(), "run `make docs` to regenerate docs/merge-methods.md"
