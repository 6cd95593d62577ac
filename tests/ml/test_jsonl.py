"""One JSONL reader for the CLI and packages: BOM, CRLF, separators inside strings, bad lines by number."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from app.cli.main import app
from app.ml.errors import InvalidPackage
from app.ml.jsonl import JsonlError, parse_jsonl, read_objects
from app.ml.packages import MANIFEST_NAME, extract_package

from .test_packages import ONNX_MANIFEST, write_zip, yaml_of

# Raw in a JSON string (JSON escapes only U+0000..U+001F), and each a line break to str.splitlines().
SEPARATORS = "\u2028\u2029\u0085\x1c\x1d\x1e\x0b\x0c"


def jsonl_bytes(*rows: object, newline: str = "\n") -> bytes:
    return "".join(json.dumps(r, ensure_ascii=False) + newline for r in rows).encode()


def test_separators_inside_strings_stay_in_their_line() -> None:
    text = f"one{SEPARATORS}line"
    data = jsonl_bytes({"text": text, "label": 0}, {"text": "two", "label": 1})
    assert len(data.decode().splitlines()) > 2  # what the old reader did
    assert [v for _, v in parse_jsonl(data, "f")] == [{"text": text, "label": 0}, {"text": "two", "label": 1}]


def test_bom_crlf_and_blank_lines() -> None:
    data = b"\xef\xbb\xbf" + jsonl_bytes({"a": 1}, {"a": 2}, newline="\r\n").replace(
        b"\r\n", b"\r\n\r\n  \t\n", 1
    )
    assert list(parse_jsonl(data, "f")) == [(1, {"a": 1}), (4, {"a": 2})]
    assert list(parse_jsonl("\ufeff" + '{"a": 1}\n', "f")) == [(1, {"a": 1})]


@pytest.mark.parametrize(
    ("data", "match", "line"),
    [
        (b'{"a": 1}\nnot json\n', r"f line 2 is not JSON: Expecting value at column 1", 2),
        (b'{"a": 1}\n{"a": \n', r"f line 2 is not JSON", 2),
        (b'{"a": 1}\n\n{"a": "\xff"}\n', r"f is not UTF-8: line 3", 3),
        (b"\u2028".decode("unicode_escape").encode() + b"\n", r"f line 1 is not JSON", 1),
        (b"[" * 100_000 + b"\n", r"f line 1 is not JSON", 1),
    ],
)
def test_a_bad_line_is_named_by_its_number(data: bytes, match: str, line: int) -> None:
    with pytest.raises(JsonlError, match=match) as info:
        list(parse_jsonl(data, "f"))
    assert info.value.line == line


def test_read_objects_refuses_other_values(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    path.write_bytes(b'{"a": 1}\n[1, 2]\n')
    with pytest.raises(JsonlError, match="line 2 is not a JSON object, it is list"):
        read_objects(path)


def test_package_inputs_keep_separators_inside_their_texts(tmp_path: Path) -> None:
    texts = [f"first{SEPARATORS}input", "second"]
    manifest = {**ONNX_MANIFEST, "inputs": "inputs.jsonl"}
    inputs = b"\xef\xbb\xbf" + jsonl_bytes(*({"text": t} for t in texts), newline="\r\n")
    members = [(MANIFEST_NAME, yaml_of(manifest)), ("model.onnx", b"\x08\x07"), ("inputs.jsonl", inputs)]
    assert extract_package(write_zip(tmp_path / "p.zip", members), tmp_path / "pkg").inputs == texts


def test_package_inputs_name_the_bad_line(tmp_path: Path) -> None:
    manifest = {**ONNX_MANIFEST, "inputs": "inputs.jsonl"}
    inputs = b'{"text": "fine"}\n{"text": "fine"}\n{oops}\n'
    members = [(MANIFEST_NAME, yaml_of(manifest)), ("model.onnx", b"\x08\x07"), ("inputs.jsonl", inputs)]
    with pytest.raises(InvalidPackage, match=r"inputs file 'inputs\.jsonl' line 3 is not JSON"):
        extract_package(write_zip(tmp_path / "p.zip", members), tmp_path / "pkg")


@pytest.mark.parametrize(
    ("content", "match"),
    [
        (b"\xef\xbb\xbf" + b'{"text": "a", "label": 0}\nnot json\n', "line 2 is not JSON"),
        (b'{"text": "a", "label": 0}\n{"text": "b"}\n', 'line 2: need "text" and "label"'),
        (b'{"text": "a", "label": 0}\n"just a string"\n', "line 2 is not a JSON object"),
    ],
)
def test_the_cli_reports_a_bad_few_shot_line_without_a_traceback(
    tmp_path: Path, content: bytes, match: str
) -> None:
    shots = tmp_path / "shots.jsonl"
    shots.write_bytes(content)
    result = CliRunner().invoke(
        app, ["task", str(shots), "--label-names", "a,b", "--url", "http://127.0.0.1:9"]
    )
    assert result.exit_code == 2, result.output
    assert match in result.output and str(shots) in result.output
    assert ("Traceback" not in result.output and result.exception is None) or isinstance(
        result.exception, SystemExit
    )


def test_the_cli_spec_command_reads_the_shots_before_loading_a_model(tmp_path: Path) -> None:
    shots = tmp_path / "shots.jsonl"
    shots.write_bytes(b'{"text": "a", "label": "a"}\n{"text": "b", "label": "c"}\n')
    result = CliRunner().invoke(
        app, ["spec", "--few-shot", str(shots), "--label-names", "a,b", "--out", str(tmp_path / "out")]
    )
    assert result.exit_code == 2, result.output
    assert "line 2: label 'c' is not among the label names" in result.output
    assert not (tmp_path / "out.safetensors").exists()


def test_the_cli_reads_a_few_shot_file_with_bom_crlf_and_separators(tmp_path: Path) -> None:
    from app.cli.common import read_few_shot as _read_few_shot

    shots = tmp_path / "shots.jsonl"
    rows = [{"text": f"x{SEPARATORS}y", "label": "a"}, {"text": "z", "label": "b"}]
    shots.write_bytes(b"\xef\xbb\xbf" + jsonl_bytes(*rows, newline="\r\n"))
    assert _read_few_shot(shots) == ([r["text"] for r in rows], ["a", "b"])
