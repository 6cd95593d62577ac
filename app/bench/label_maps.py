"""How well the names' meaning picks label maps: the calibration behind `NAME_MARGIN`.

Every label set of the shared datasets that is not codes is renamed as the identification
benchmark's users rename it (synonyms, French), whole and in three random halves, and mapped by
meaning onto the original names with the space's frozen base (`map_by_meaning`'s similarity and
assignment, `meaning_margin`). For each renaming: whether the best assignment is the right map, and its margin (the
least loss per moved label of any other map). The table says how many right and wrong maps a
margin lets through; no model is trained, so it runs in about a minute.

Then the other way round: each label set (its own names, synonyms, French) onto every *other*
task's label set with at least as many labels and no name in common (``cross``). No such map is
the user's own task's, yet many read as plausible ("polite" / "insulting" onto "positive" /
"negative"), and their margins say how little a margin can guard against a learnware of another
task: that is the shot check's job, on the user's examples.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from tqdm import tqdm

from app.bench.identification_kinds import FRENCH, SYNONYMS, _renamed
from app.bench.report import machine, md_table, write_json
from app.ml.ranking import NAME_MARGIN, labels_are_codes, meaning_margin, normalise_label

if TYPE_CHECKING:
    from app.ml.spec_space import SpecSpace

HALVES = 3
"""Random halves (at least two labels) per label set of four or more, per renaming."""

CROSS_MAX_LABELS = 20
"""Label sets mapped onto other tasks' (the intent sets of 77 and 150 are only mapped onto)."""

CROSS_SHOWN = 15
"""How many of the maps onto other tasks' label sets the page lists (largest margins first)."""


def _label_sets(datasets: Path) -> dict[str, list[str]]:
    sets = {}
    for folder in sorted(Path(datasets).iterdir()):
        names_file = folder / "labels.json"
        if (folder / "train.jsonl").is_file() and names_file.is_file():
            names = [str(n) for n in json.loads(names_file.read_text())]
            if not labels_are_codes(names):
                sets[folder.name] = names
    return sets


def run_label_map_benchmark(out: Path, datasets: Path, margins: tuple[float, ...] = ()) -> dict[str, Any]:
    """Write ``out`` (JSON) and its Markdown page; return the result."""
    from app.ml.spec_space import load_space

    space = load_space()

    rng = np.random.default_rng(0)
    rows: list[dict[str, Any]] = []
    for task, names in tqdm(list(_label_sets(datasets).items()), desc="label sets"):
        for renaming, table in (("synonyms", SYNONYMS), ("french", FRENCH)):
            renamed = _renamed(names, table)
            picks: list[tuple[str, list[int]]] = [("whole", list(range(len(names))))]
            if len(names) >= 4:
                for h in range(HALVES):
                    size = max(2, len(names) // 2)
                    picks.append((f"half {h}", sorted(rng.choice(len(names), size, replace=False).tolist())))
            for part, classes in picks:
                best, margin = meaning_margin(space.name_similarity([renamed[c] for c in classes], names))
                rows.append(
                    {
                        "task": task,
                        "renaming": renaming,
                        "part": part,
                        "labels": len(classes),
                        "right": bool(np.array_equal(best, np.asarray(classes))),
                        "margin": margin,
                    }
                )
    cross = _cross_task_maps(space, _label_sets(datasets))
    wrong = [r["margin"] for r in rows if not r["right"]]
    right = [r["margin"] for r in rows if r["right"]]
    at = sorted({NAME_MARGIN, *margins})
    result = {
        "benchmark": "label-maps",
        "machine": machine(),
        "space_id": space.id,
        "command": f"pavedock bench label-maps --out {out}",
        "name_margin": NAME_MARGIN,
        "maps": len(rows),
        "right": len(right),
        "wrong": len(wrong),
        "largest_wrong_margin": max(wrong) if wrong else None,
        "at_margin": [
            {
                "margin": m,
                "right_kept": sum(v >= m for v in right),
                "wrong_kept": sum(v >= m for v in wrong),
                "whole_right_kept": sum(
                    r["margin"] >= m for r in rows if r["right"] and r["part"] == "whole"
                ),
            }
            for m in at
        ],
        "cross_maps": len(cross),
        "cross_at_margin": [{"margin": m, "kept": sum(r["margin"] >= m for r in cross)} for m in at],
        "largest_cross_margin": max((r["margin"] for r in cross), default=None),
        "cross_top": sorted(cross, key=lambda r: -r["margin"])[:CROSS_SHOWN],
        "rows": rows,
    }
    write_json(out, result)
    out.with_suffix(".md").write_text(render_markdown(result))
    return result


def _cross_task_maps(space: SpecSpace, sets: dict[str, list[str]]) -> list[dict[str, Any]]:
    """The best map by meaning of each label set (as named, and renamed) onto every other task's
    label set with at least as many labels and no name in common, with its margin."""
    rows: list[dict[str, Any]] = []
    for task, names in tqdm(list(sets.items()), desc="other tasks' label sets"):
        if len(names) > CROSS_MAX_LABELS:
            continue
        for renaming, table in (("own names", None), ("synonyms", SYNONYMS), ("french", FRENCH)):
            user = names if table is None else _renamed(names, table)
            for other, model in sets.items():
                shared = {normalise_label(n) for n in names} & {normalise_label(n) for n in model}
                if other == task or len(model) < len(user) or shared:
                    continue
                best, margin = meaning_margin(space.name_similarity(user, model))
                rows.append(
                    {
                        "task": task,
                        "renaming": renaming,
                        "onto": other,
                        "map": {user[i]: model[int(j)] for i, j in enumerate(best)},
                        "margin": margin,
                    }
                )
    return rows


def render_markdown(result: dict[str, Any]) -> str:
    lines = [
        "# Label maps by meaning: the margin's calibration",
        "",
        f"Command: `{result['command']}`; space `{result['space_id']}`; {result['machine']['date']}.",
        "",
        f"{result['maps']} renamings of the shared datasets' label sets (synonyms and French as the "
        "identification benchmark's users name them, whole and in random halves) mapped onto the "
        f"original names by meaning: {result['right']} right, {result['wrong']} wrong; the largest "
        f"margin of a wrong map is {result['largest_wrong_margin']:.3f}. The dock's margin is "
        f"{result['name_margin']}.",
        "",
        md_table(
            ["margin", "right maps kept", "wrong maps kept", "whole label sets: right kept"],
            [
                [
                    f"{r['margin']:.3f}",
                    f"{r['right_kept']} / {result['right']}",
                    r["wrong_kept"],
                    r["whole_right_kept"],
                ]
                for r in result["at_margin"]
            ],
        ),
        "",
        "## Wrong maps",
        "",
        md_table(
            ["task", "renaming", "part", "labels", "margin"],
            [
                [r["task"], r["renaming"], r["part"], r["labels"], f"{r['margin']:.3f}"]
                for r in sorted(result["rows"], key=lambda r: -r["margin"])
                if not r["right"]
            ],
        ),
        "",
        "## Onto other tasks' label sets",
        "",
        f"Each label set of at most {CROSS_MAX_LABELS} labels (own names, synonyms, French) onto "
        f"every other task's label set with at least as many labels and no name in common: "
        f"{result['cross_maps']} maps, none of them the user's own task's; the largest margin is "
        f"{result['largest_cross_margin']:.3f}. Many read as plausible; a margin cannot refuse "
        "them without refusing most right renamings, so a learnware of another task is kept out "
        "by the shot check on the user's examples, not by the names.",
        "",
        md_table(
            ["margin", "maps kept"],
            [
                [f"{r['margin']:.3f}", f"{r['kept']} / {result['cross_maps']}"]
                for r in result["cross_at_margin"]
            ],
        ),
        "",
        md_table(
            ["task", "renaming", "onto", "map", "margin"],
            [
                [
                    r["task"],
                    r["renaming"],
                    r["onto"],
                    ", ".join(f"{a} → {b}" for a, b in r["map"].items()),
                    f"{r['margin']:.3f}",
                ]
                for r in result["cross_top"]
            ],
        ),
    ]
    return "\n".join(lines) + "\n"
