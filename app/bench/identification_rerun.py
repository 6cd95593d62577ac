"""An identification run with some of its kinds rerun under newer code, as one run.

A change that moves only some kinds' users (the spec-only agreement check moves spec-only users
alone: every other user's ranking is computed exactly as before) is measured by rerunning those
kinds (`pavedock bench identify --kind ...`) on the same market and putting their users in place
of the earlier run's. The per-kind table is recomputed from the users, the rerun's command is
kept beside the first, and a run of another profile, market, spec space or user set is refused.
This module trains and ranks nothing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.bench.identification import render_markdown
from app.bench.identification_kinds import summarise
from app.bench.report import write_json


class RerunMismatch(ValueError):
    """The rerun is not of the same benchmark: another profile, market, space or set of users."""


@dataclass(frozen=True)
class _Row:
    """What `summarise` reads of a user: its kind and user seed."""

    kind: str
    seed: int


def _key(user: dict[str, Any]) -> tuple[str, str, int]:
    return (user["kind"], user["task"], int(user["seed"]))


def with_rerun(base: dict[str, Any], rerun: dict[str, Any]) -> dict[str, Any]:
    """``base`` (a `bench identify` result) with the users of ``rerun``'s kinds taken from ``rerun``."""
    for key in ("space_id",):
        if base.get(key) != rerun.get(key):
            raise RerunMismatch(f"another {key}: {base.get(key)!r} against {rerun.get(key)!r}")
    if base["profile"] != rerun["profile"]:
        raise RerunMismatch(
            f"another profile: {base['profile']['name']!r} against {rerun['profile']['name']!r}"
        )
    if int(base.get("market_seed", 0)) != int(rerun.get("market_seed", 0)):
        raise RerunMismatch(
            f"another market: seed {base.get('market_seed', 0)} against {rerun.get('market_seed', 0)}"
        )
    kinds = list(dict.fromkeys(u["kind"] for u in rerun["kind_users"]))
    if not kinds:
        raise RerunMismatch("the rerun has no users")
    fresh = {_key(u): u for u in rerun["kind_users"]}
    before = {_key(u) for u in base["kind_users"] if u["kind"] in kinds}
    if before != set(fresh):
        raise RerunMismatch(
            f"the rerun's users of {', '.join(kinds)} are not the run's: "
            f"{len(set(fresh) - before)} new, {len(before - set(fresh))} missing"
        )
    users = [fresh.get(_key(u), u) for u in base["kind_users"]]
    table = summarise([(_Row(u["kind"], int(u["seed"])), u) for u in users])
    merged = {
        **base,
        "kinds": table,
        "kind_users": users,
        "reruns": [
            *base.get("reruns", []),
            {"kinds": kinds, "command": rerun["command"], "date": rerun["machine"]["date"]},
        ],
    }
    if "spec only" in kinds:
        merged["spec_only_checked_here"] = rerun.get("spec_only_checked_here")
    return merged


def write_with_rerun(base_path: Path, rerun_path: Path, out: Path) -> dict[str, Any]:
    """`with_rerun` of two result files, written to ``out`` (.json and its .md page)."""
    merged = with_rerun(json.loads(Path(base_path).read_text()), json.loads(Path(rerun_path).read_text()))
    write_json(out, merged)
    out.with_suffix(".md").write_text(render_markdown(merged))
    return merged
