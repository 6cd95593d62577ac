"""Model cards as the Hugging Face tools write them: what ``pavedock package`` takes from them
(licence, tags, description) and what it leaves (placeholders, library and machine tags)."""

from __future__ import annotations

from pathlib import Path

from huggingface_hub import ModelCard, ModelCardData
from peft import LoraConfig, get_peft_model
from transformers import BertModel

from app.ml.model_card import onnx_card, read_card, spdx_license
from tests.fixtures.tiny_bases import make_tiny_bert


def test_a_hub_card_gives_its_licence_tags_and_description(tmp_path: Path) -> None:
    card = ModelCard.from_template(
        ModelCardData(
            license="apache-2.0",
            tags=["sentiment", "reviews", "generated_from_trainer", "base_model:finetune:x/y"],
            language="en",
        ),
        model_description="A MiniLM classifier of movie reviews,\nfine-tuned on SST-2.",
    )
    card.save(tmp_path / "README.md")
    fields = read_card(tmp_path)
    assert fields.license == "Apache-2.0"
    assert fields.tags == ["sentiment", "reviews"]
    assert fields.description == "A MiniLM classifier of movie reviews, fine-tuned on SST-2."
    assert fields.where == "README.md"


def test_peft_s_own_card_gives_nothing_that_is_a_placeholder(tmp_path: Path) -> None:
    """peft's save_pretrained writes the hub template: no licence, no description, only
    library and machine tags beside "lora"."""
    base = make_tiny_bert(tmp_path / "base", ["good", "bad"])
    model = get_peft_model(BertModel.from_pretrained(base), LoraConfig(r=2, target_modules=["query"]))
    model.save_pretrained(tmp_path / "adapter")
    assert "More Information Needed" in (tmp_path / "adapter" / "README.md").read_text()
    fields = read_card(tmp_path / "adapter")
    assert fields.license is None and fields.description == ""
    assert all(":" not in t and t not in ("transformers", "peft") for t in fields.tags), fields.tags


def test_other_licences_and_placeholders(tmp_path: Path) -> None:
    (tmp_path / "README.md").write_text(
        "---\nlicense: other\nlicense_name: acme-model-licence\ntags: sentiment\n---\n"
        "# m\n\n## Model description\n\nMore information needed\n\n## Training\n\nAdamW.\n"
    )
    fields = read_card(tmp_path)
    assert fields.license == "acme-model-licence"
    assert fields.tags == [] and fields.description == ""  # a string is not a tag list
    (tmp_path / "README.md").write_text("---\nlicense: [unclosed\n---\n# m\n")
    assert read_card(tmp_path).license is None  # broken YAML: no fields, no crash
    (tmp_path / "README.md").write_text("---\nlicense: unknown\n---\n")
    assert read_card(tmp_path).license is None
    assert read_card(tmp_path / "absent").where == ""
    assert spdx_license("cc-by-sa-4.0") == "CC-BY-SA-4.0" and spdx_license("my-own") == "my-own"
    assert onnx_card("  TF-IDF and\n logistic regression ").description == "TF-IDF and logistic regression"
