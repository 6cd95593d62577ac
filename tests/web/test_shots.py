"""Few-shot examples as people have them: CSV, TSV or JSONL, pasted or uploaded, in the
encodings files come in; every refusal names the line and the field."""

from __future__ import annotations

import pytest

from app.web.shots import ShotsError, decode, parse


def test_csv_with_a_header_in_any_order_and_quoted_commas() -> None:
    shots = parse('Label,Text\npositive,"good, really"\nnegative,bad\n')
    assert shots.format == "csv"
    assert shots.texts == ["good, really", "bad"]
    assert shots.labels == ["positive", "negative"]
    assert shots.label_names == ["positive", "negative"]  # the order they first appear


def test_csv_without_a_header_is_text_then_label() -> None:
    shots = parse("great film,positive\ndull film,negative\n", label_names="negative, positive")
    assert shots.texts == ["great film", "dull film"] and shots.label_names == ["negative", "positive"]


def test_tsv_and_jsonl_are_detected() -> None:
    assert parse("text\tlabel\na\tx\nb\ty\n").format == "tsv"
    jsonl = '{"text": "a", "label": "x"}\n\n{"sentence": "b", "class": "y"}\n'
    shots = parse(jsonl)
    assert shots.format == "jsonl" and shots.texts == ["a", "b"] and shots.labels == ["x", "y"]
    assert parse("a,x\tb\nc,d\te\n", filename="shots.tsv").texts == ["a,x", "c,d"]  # the extension decides


def test_class_ids_take_the_given_names() -> None:
    shots = parse('{"text": "a", "label": 0}\n{"text": "b", "label": 1}\n', label_names="neg,pos")
    assert shots.labels == ["neg", "pos"]
    with pytest.raises(ShotsError, match="give the label names") as missing:
        parse("a,0\nb,1\n")
    assert missing.value.field == "label_names"
    with pytest.raises(ShotsError, match=r"label ids \[2\] are out of range"):
        parse("a,0\nb,2\n", label_names="neg,pos")


@pytest.mark.parametrize(
    ("text", "names", "message", "field"),
    [
        ("a,x\n", "", "found 1 example", "examples"),
        ("a,x\nb,x\n", "", "single class", "examples"),
        ("a,x\nb\n", "", "line 2 has 1 column", "examples"),
        ("a,x\n,y\n", "", "line 2: the text is empty", "examples"),
        ('{"text": "a", "label": "x"}\n{"text": "b"}\n', "", "line 2 has no label", "examples"),
        ('{"text": "a", "label": "x"}\nnot json\n', "", "line 2 is not JSON", "examples"),
        ("a,x\nb,y\n", "x,z", r"labels \['y'\] are not among", "label_names"),
        ("a,x\nb,y\n", "x", "at least two label names", "label_names"),
        ("a,x\nb,y\n", "x,x", "label names repeat", "label_names"),
    ],
)
def test_bad_examples_are_refused_beside_their_field(text: str, names: str, message: str, field: str) -> None:
    with pytest.raises(ShotsError, match=message) as refused:
        parse(text, label_names=names)
    assert refused.value.field == field


def test_limit_on_the_number_of_examples() -> None:
    with pytest.raises(ShotsError, match="3 examples, over the limit of 2"):
        parse("a,x\nb,y\nc,x\n", max_examples=2)


def test_encodings_utf8_bom_and_utf16_are_read_others_refused() -> None:
    text = "text,label\ncafé,x\nthé,y\n"
    assert decode(text.encode("utf-8-sig")) == text
    assert decode(text.encode("utf-16")) == text  # with its BOM
    assert parse(decode(text.encode("utf-8-sig"))).texts == ["café", "thé"]
    with pytest.raises(ShotsError, match=r"not UTF-8 \(byte 14 is 0xe9\)"):
        decode(text.encode("latin-1"))
