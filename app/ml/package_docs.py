"""The reference part of docs/packages.md, generated from the code that checks packages.

The manifest table is made from :class:`Manifest`'s JSON schema (types, limits, required,
defaults) and :data:`FIELD_DOCS`; the layout table from :data:`REQUIRED_FILES`. A test keeps the
document equal to this output (``make docs`` rewrites it), and refuses a field without a line
here, so the document cannot drift from what the dock accepts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from app.ml.packages import FORBIDDEN_SUFFIXES, MANIFEST_NAME, REQUIRED_FILES, Manifest

BEGIN = "<!-- BEGIN GENERATED: app/ml/package_docs.py (make docs) -->"
END = "<!-- END GENERATED -->"

FIELD_DOCS: dict[str, str] = {
    "name": "What users see in rankings and listings.",
    "description": "What the model does and what it was trained on, in plain words.",
    "tags": "Free-form tags; `GET /v1/learnwares?tag=…` filters by them.",
    "task_type": "What the model does; text classification is the one task the dock runs.",
    "label_names": (
        "The classes, in the order of the model's outputs (index *i* is output *i*). At least two, "
        "distinct. Users' tasks are matched on them; a `peft-lora` adapter is read through a head "
        "made of these very names."
    ),
    "model_format": "How the dock runs the model: one of the formats above.",
    "base_model": (
        "Required for `peft-lora` and `pooled-linear`: the registered base the adapter or the linear "
        "map applies to (`pavedock bases list`). "
        "For `hf-seqcls`, the base it was fine-tuned from (lets the dock merge full fine-tunes)."
    ),
    "license": "The licence users may reuse the model under (an SPDX id such as `Apache-2.0`).",
    "inputs": (
        'Path in the zip of a JSONL file of `{"text": ...}` lines: the inputs the dock runs the model '
        "on to validate it and fit its spec. Required by the dock (at most 10,000; a few hundred "
        "typical inputs of every class)."
    ),
    "spec": (
        "Stem path in the zip of a spec fitted by the developer (`<stem>.safetensors` + `<stem>.json`, "
        "as `pavedock spec --package` writes them); the dock checks its space, shape and values. "
        "Usually sent beside the package instead (`pavedock submit --spec`)."
    ),
}

FORMAT_DOCS: dict[str, str] = {
    "peft-lora": "a LoRA adapter over a registered base, read through the label-name head",
    "hf-seqcls": "a transformers sequence-classification folder (a built-in architecture, safetensors)",
    "onnx": "an ONNX classifier taking one string tensor (scikit-learn through skl2onnx, or any exporter)",
    "pooled-linear": (
        "one d × d float matrix `weight` applied to a registered base's mean-pooled embeddings, read "
        "through the label-name head (a UTD transfer's result)"
    ),
}


def _type(schema: dict[str, Any]) -> str:
    options = [s for s in schema.get("anyOf", [schema]) if s.get("type") != "null"]
    one = options[0]
    if "const" in one:
        return f"`{one['const']}`"
    if "enum" in one:
        return "one of " + ", ".join(f"`{v}`" for v in one["enum"])
    if one.get("type") == "array":
        return f"list of {one['items']['type']}s"
    return str(one.get("type", "any"))


def _limits(schema: dict[str, Any]) -> str:
    one = next((s for s in schema.get("anyOf", [schema]) if s.get("type") != "null"), schema)
    parts = []
    if "minLength" in one and one["minLength"] > 0:
        parts.append(f"≥ {one['minLength']} chars")
    if "maxLength" in one:
        parts.append(f"≤ {one['maxLength']:,} chars")
    if "maxItems" in one:
        parts.append(f"≤ {one['maxItems']:,} items")
    return ", ".join(parts)


def manifest_reference_markdown() -> str:
    """The generated block of docs/packages.md: layouts and every manifest field."""
    missing = sorted(set(Manifest.model_fields) - set(FIELD_DOCS))
    stale = sorted(set(FIELD_DOCS) - set(Manifest.model_fields))
    if missing or stale:
        raise ValueError(f"FIELD_DOCS out of step with Manifest: missing {missing}, stale {stale}")
    schema = Manifest.model_json_schema()
    required = set(schema.get("required", []))
    lines = [BEGIN, "", f"### Files each format needs (beside `{MANIFEST_NAME}` at the zip's root)", ""]
    lines += ["| `model_format` | what | files |", "|---|---|---|"]
    for fmt, wants in REQUIRED_FILES.items():
        files = "; ".join(
            f"`{w}`" if isinstance(w, str) else "one of " + ", ".join(f"`{x}`" for x in w) for w in wants
        )
        lines.append(f"| `{fmt}` | {FORMAT_DOCS[fmt]} | {files} |")
    lines += [
        "",
        "Refused anywhere in a package: "
        + ", ".join(f"`{s}`" for s in sorted(FORBIDDEN_SUFFIXES))
        + " files "
        "(pickles, code, native binaries), links, absolute or `..` paths, nested zips, configs that "
        "ask for remote code (`auto_map`, `trust_remote_code`).",
        "",
        f"### `{MANIFEST_NAME}` fields",
        "",
        "| field | type | required | default | limits | meaning |",
        "|---|---|---|---|---|---|",
    ]
    for name, prop in schema["properties"].items():
        default = "" if name in required or "default" not in prop else f"`{prop['default']!r}`"
        if prop.get("default", "") is None:
            default = "absent"
        if name == "tags":
            default = "`[]`"
        if name == "base_model":
            need = "for `peft-lora`, `pooled-linear`"
        elif name == "inputs":
            need = "by the dock"
        else:
            need = "yes" if name in required else "no"
        lines.append(
            f"| `{name}` | {_type(prop)} | {need} | {default} | {_limits(prop)} | {FIELD_DOCS[name]} |"
        )
    lines += ["", "Any other field is refused (the manifest is checked strictly).", "", END]
    return "\n".join(lines)


def write_reference(doc: Path) -> None:
    """Replace the generated block of ``doc`` with the current one."""
    text = doc.read_text(encoding="utf-8")
    start, end = text.index(BEGIN), text.index(END) + len(END)
    doc.write_text(text[:start] + manifest_reference_markdown() + text[end:], encoding="utf-8")
