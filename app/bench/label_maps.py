"""How well the names' meaning picks label maps: the calibration behind `NAME_MARGIN`.

Every label set of the shared datasets that is not codes is renamed as the identification
benchmark's users rename it (synonyms, French), whole and in three random halves, and mapped by
meaning onto the original names with the space's frozen base (`map_by_meaning`'s similarity and
assignment, `meaning_margin`). For each renaming: whether the best assignment is the right map, and its margin (the
least loss per moved label of any other map). The table says how many right and wrong maps a
margin lets through; no model is trained, so it runs in about a minute.

The margin was chosen on those two renamings. Two more, written after it was (``HELD_OUT``: how
people tag data, "neg", "enty", "NOT" / "OFF", and German), are mapped the same way and reported
apart: whether the margin holds on wordings nobody chose it on.

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

from app.bench.identification_kinds import FRENCH, GERMAN, SYNONYMS, WORDING, _renamed
from app.bench.report import machine, md_table, write_json
from app.ml.label_maps import NAME_MARGIN, label_margins, labels_are_codes, meaning_margin, normalise_label

if TYPE_CHECKING:
    from app.ml.spec_space import SpecSpace

HALVES = 3
"""Random halves (at least two labels) per label set of four or more, per renaming."""

CHOSEN_ON = (("synonyms", SYNONYMS), ("french", FRENCH))
"""The renamings `NAME_MARGIN` was chosen on."""

HELD_OUT = (("other wording", WORDING), ("german", GERMAN))
"""Renamings written after the margin was chosen (2026-12-06), to test it."""

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

    sets = _label_sets(datasets)
    rows = _renamings(space, sets, CHOSEN_ON, np.random.default_rng(0))
    held_out = _renamings(space, sets, HELD_OUT, np.random.default_rng(1))
    cross = _cross_task_maps(space, sets)
    at = sorted({NAME_MARGIN, *margins})
    result = {
        "benchmark": "label-maps",
        "machine": machine(),
        "space_id": space.id,
        "command": f"pavedock bench label-maps --out {out}",
        "name_margin": NAME_MARGIN,
        **_summary(rows, at),
        "held_out": _summary(held_out, at),
        "cross_maps": len(cross),
        "cross_at_margin": [{"margin": m, "kept": sum(r["margin"] >= m for r in cross)} for m in at],
        "largest_cross_margin": max((r["margin"] for r in cross), default=None),
        "cross_top": sorted(cross, key=lambda r: -r["margin"])[:CROSS_SHOWN],
    }
    write_json(out, result)
    out.with_suffix(".md").write_text(render_markdown(result))
    return result


def _renamings(
    space: SpecSpace,
    sets: dict[str, list[str]],
    renamings: tuple[tuple[str, dict[str, str]], ...],
    rng: np.random.Generator,
) -> list[dict[str, Any]]:
    """Each label set renamed by each table, whole and in `HALVES` random halves (four labels or
    more), mapped by meaning onto its own names: whether the best map is the right one, its
    margin (`meaning_margin`), and label by label (`label_margins`) how many labels the names
    place clearly (by `NAME_MARGIN`) and unclearly, right and wrong."""
    rows: list[dict[str, Any]] = []
    for task, names in tqdm(list(sets.items()), desc=f"label sets ({', '.join(r for r, _ in renamings)})"):
        for renaming, table in renamings:
            renamed = _renamed(names, table)
            picks: list[tuple[str, list[int]]] = [("whole", list(range(len(names))))]
            if len(names) >= 4:
                for h in range(HALVES):
                    size = max(2, len(names) // 2)
                    picks.append((f"half {h}", sorted(rng.choice(len(names), size, replace=False).tolist())))
            for part, classes in picks:
                best, margins = label_margins(space.name_similarity([renamed[c] for c in classes], names))
                right = best == np.asarray(classes)
                clear = margins >= NAME_MARGIN
                rows.append(
                    {
                        "task": task,
                        "renaming": renaming,
                        "part": part,
                        "labels": len(classes),
                        "right": bool(right.all()),
                        "margin": float(margins.min()),
                        "clear_right": int(np.count_nonzero(right & clear)),
                        "clear_wrong": int(np.count_nonzero(~right & clear)),
                        "unclear_right": int(np.count_nonzero(right & ~clear)),
                        "unclear_wrong": int(np.count_nonzero(~right & ~clear)),
                    }
                )
    return rows


def _summary(rows: list[dict[str, Any]], at: list[float]) -> dict[str, Any]:
    """How many maps are right and wrong, and how many of each a margin lets through (whole label
    sets apart: a half is a restriction, which the dock lets the examples choose where it has them)."""
    wrong = [r for r in rows if not r["right"]]
    right = [r for r in rows if r["right"]]
    return {
        "maps": len(rows),
        "right": len(right),
        "wrong": len(wrong),
        "largest_wrong_margin": max((r["margin"] for r in wrong), default=None),
        "largest_wrong_whole_margin": max((r["margin"] for r in wrong if r["part"] == "whole"), default=None),
        "labels": _label_counts(rows),
        "at_margin": [
            {
                "margin": m,
                "right_kept": sum(r["margin"] >= m for r in right),
                "wrong_kept": sum(r["margin"] >= m for r in wrong),
                "whole_right_kept": sum(r["margin"] >= m for r in right if r["part"] == "whole"),
                "whole_wrong_kept": sum(r["margin"] >= m for r in wrong if r["part"] == "whole"),
            }
            for m in at
        ],
        "rows": rows,
    }


LABEL_COUNTS = ("clear_right", "clear_wrong", "unclear_right", "unclear_wrong")
"""How each label of a map is placed by the names: clearly or not (`label_margins` against
`NAME_MARGIN`), right or wrong."""


def _label_counts(rows: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """The labels of whole label sets and of halves apart, counted by `LABEL_COUNTS`."""
    counts = {}
    for part in ("whole", "half"):
        mine = [r for r in rows if r["part"].startswith(part)]
        counts[part] = {"labels": sum(r["labels"] for r in mine)}
        counts[part].update({key: sum(r[key] for r in mine) for key in LABEL_COUNTS})
    return counts


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
        _wrong_maps(result["rows"]),
        "",
        *_held_out_lines(result),
        "",
        *_label_lines(result),
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


def _held_out_lines(result: dict[str, Any]) -> list[str]:
    held = result["held_out"]
    at = next(r for r in held["at_margin"] if r["margin"] == result["name_margin"])
    return [
        "## Held out: other wording and German",
        "",
        f'Renamings written after the margin was chosen (how people tag data: "neg", "enty", '
        f'"NOT" / "OFF", "sad"; and German): {held["maps"]} maps, {held["right"]} right, '
        f"{held['wrong']} wrong. At the dock's margin {result['name_margin']}: {at['right_kept']} right "
        f"and {at['wrong_kept']} wrong maps kept; of whole label sets (a relabelling, which a map by "
        f"meaning serves as it stands) {at['whole_right_kept']} right and {at['whole_wrong_kept']} wrong. "
        "A half is a restriction to a few of a larger model's classes: where the user has examples "
        "the dock lets them choose it, priced by the names' reading (`choose_label_map`), so a wrong "
        "half that clears the margin is weighed against the examples, not served as it stands.",
        "",
        md_table(
            ["margin", "right maps kept", "wrong maps kept", "whole: right kept", "whole: wrong kept"],
            [
                [
                    f"{r['margin']:.3f}",
                    f"{r['right_kept']} / {held['right']}",
                    r["wrong_kept"],
                    r["whole_right_kept"],
                    r["whole_wrong_kept"],
                ]
                for r in held["at_margin"]
            ],
        ),
        "",
        _wrong_maps(held["rows"]),
    ]


def _label_lines(result: dict[str, Any]) -> list[str]:
    """Label by label: how clearly the names place each label of the maps above, and whether
    the labels they place unclearly are placed right all the same."""
    rows = [
        [title, part, c["labels"], *(c[key] for key in LABEL_COUNTS)]
        for title, labels in (("chosen on", result["labels"]), ("held out", result["held_out"]["labels"]))
        for part, c in labels.items()
    ]
    return [
        "## Label by label",
        "",
        "A label is placed clearly where every other placement of it loses at least the margin "
        f"{result['name_margin']} per label it moves (`label_margins`). Where the examples choose a "
        "map, the names' reading weighs in on every label (`names_log_prior`): reading only the "
        "labels placed clearly was tried on 2026-12-06 and lost on the full profile (market 1 "
        "0.963 → 0.961 normalised), as most labels placed unclearly are placed right all the same:",
        "",
        md_table(
            [
                "renamings",
                "part",
                "labels",
                "clearly, right",
                "clearly, wrong",
                "unclearly, right",
                "unclearly, wrong",
            ],
            rows,
        ),
    ]


def _wrong_maps(rows: list[dict[str, Any]]) -> str:
    """The wrong maps of ``rows``, largest margin first."""
    return md_table(
        ["task", "renaming", "part", "labels", "margin"],
        [
            [r["task"], r["renaming"], r["part"], r["labels"], f"{r['margin']:.3f}"]
            for r in sorted(rows, key=lambda r: -r["margin"])
            if not r["right"]
        ],
    )
