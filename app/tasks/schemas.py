"""User task bodies."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field, model_validator

from app.api.types import MAX_SHOTS, ClassId, Label, Shot
from app.db.models import TaskStatus
from app.ml.ranking import DUPLICATE_COSINE


class TaskCreate(BaseModel):
    """A few-shot task: texts, their labels (class ids or names) and the class names."""

    texts: list[Shot] = Field(min_length=2, max_length=MAX_SHOTS)
    labels: list[ClassId] | list[Label] = Field(
        min_length=2, max_length=MAX_SHOTS, description="class ids into label_names, or label names"
    )
    label_names: list[Label] = Field(min_length=2, max_length=1000)
    top_k: int = Field(default=10, ge=1, le=100)

    @model_validator(mode="after")
    def _same_length(self) -> TaskCreate:
        if len(self.texts) != len(self.labels):
            raise ValueError(f"{len(self.labels)} labels for {len(self.texts)} texts")
        return self


class MatchRead(BaseModel):
    """One ranked learnware and why it is where it is.

    Order of a task's matches: those the shot check ran on the task's examples and that did
    better than chance (`shot_log_likelihood` less `shot_map_cost` above a uniform guess's, the
    log of 1 / the task's label count), by that score (then `shot_accuracy`), where three or
    more did, the first five by that score plus their `agreement` with one another
    (`agreement_weighed`); then
    the unchecked ones that answer the task's labels by name (`tier` labels-by-name), by `score`
    (for a task posted as a spec only, the close matches first, by `agreement`);
    then checked ones that did no better than chance, by `score` (their check is no evidence either way); then the unchecked ones
    that would need a label map none was chosen for (`tier` label-map, no `label_map`), by `score`;
    then those that cannot answer (`tier` cannot-answer). `score` is the spec
    cosine alone, so it is not in rank order; `reason` says in one line what placed each match.
    """

    rank: int
    learnware_id: int
    score: float = Field(
        description="cosine similarity of the learnware's spec and the task's spec (with `aligned`, "
        "the task's spec refitted under the learnware's own label names)"
    )
    aligned: bool = Field(
        default=False,
        description="`score` compares the learnware with the task's spec refitted under the "
        "learnware's own label names: done where no learnware answers the task's labels by name "
        "(codes, another language, synonyms), under the map the names' meaning gives, or for two "
        "labels it does not map, under the better of both ways round (the absolute cosine); for "
        "codes of more labels, or names of more labels whose meaning maps nothing, under the "
        "alignment of the task's labels with the learnware's classes that its own spec agrees with "
        "most, counted only where that lifts it above every match's own score (`reason` says which)",
    )
    name: str
    task_type: str
    model_format: str
    label_names: list[str]
    labels_match: bool = Field(default=False, description="its label set is exactly the task's")
    tier: Literal["labels-by-name", "label-map", "cannot-answer"] | None = Field(
        default=None,
        description="what it can answer of the task's labels: all of them by name (it may have "
        "more classes: its answers are then restricted to the task's), perhaps through a label map "
        "(as many classes or more, other names), or nothing (fewer classes); None for a spec ranked "
        "without label names",
    )
    label_map: dict[str, str] | None = Field(
        default=None,
        description="its labels → the task's labels, as its answers are to be read (only the "
        "learnware's labels that answer one of the task's appear)",
    )
    label_map_how: Literal["names", "meaning", "examples"] | None = Field(
        default=None,
        description="how the label map was chosen: equal names; the meaning of the names (their "
        "embeddings agree on one map by a clear margin); or the task's examples, where the names "
        "are codes or do not decide it (where both sides' names mean something, weighed with their "
        "reading, so clear names settle what a few examples cannot, and a map they argue against "
        "costs more: `shot_map_cost`; where the task's labels are numbered codes or letters (A "
        "as 0), weighed with their numbers read as the learnware's class numbers, its '3' as the "
        "learnware's class 3 or 'LABEL_3', or counted from another of its classes or backwards "
        "where the examples bear that numbering out better, at the price of naming it; labels "
        "without examples then keep their numbers, and the reason says which numbering and how "
        "many labels follow it)",
    )
    restricted: bool = Field(
        default=False,
        description="it has classes the task does not: keep only the mapped classes of its output "
        "(the most probable among them is its answer)",
    )
    checked: bool = Field(default=False, description="the shot check ran it on the task's examples")
    shot_accuracy: float | None = Field(
        default=None,
        description="its accuracy on the task's own examples under `label_map`, where the shot check "
        "ran it; None where it was not run",
    )
    shot_confidence: float | None = Field(
        default=None,
        description="the mean probability it gave the true labels of the task's examples (the "
        "accuracy where the model gives no probabilities); None where the shot check did not run it",
    )
    shot_log_likelihood: float | None = Field(
        default=None,
        description="the mean log-probability it gave the true labels of the task's examples (each "
        "at least the log of half of chance, 0.5 / the task's label count): orders the checked matches, so a model right by luck but unsure ranks "
        "below one right and sure; None where the shot check did not run it",
    )
    shot_map_cost: float | None = Field(
        default=None,
        description="nats per example taken off `shot_log_likelihood` for a label map the task's "
        "examples chose: its description length over the examples, the log of the number of maps "
        "they chose among, or, where both label sets' names carry meaning and read the map as "
        "likelier, its cost under the names' reading plus log 2 (0 for a map by name or by "
        "meaning); None where the shot check did not run it",
    )
    agreement: float | None = Field(
        default=None,
        description="for a task posted as a spec only (the dock never saw its examples): this "
        "match's mean chance-corrected agreement (Cohen's κ, 1 the same answers, 0 no better than "
        "chance) with the other close matches that answer the task's labels by name, all run on "
        "their pooled declared inputs; it orders those matches, most first. For a task with "
        "examples (`agreement_weighed`): its κ with the first five checked matches that did "
        "better than chance, answering through their label maps, added to its shot score "
        "(`shot_log_likelihood` less `shot_map_cost`) to order them. None where it was not run",
    )
    agreement_weighed: bool = Field(
        default=False,
        description="checked, and ordered among the checked matches by its score on the task's "
        "examples plus its `agreement` with the other checked matches (one nat of score a unit "
        "of κ)",
    )
    spec_recomputed: bool | None = Field(
        default=None,
        description="its spec was fitted by the dock to the model's own predictions (true) or is "
        "the developer's uploaded spec, checked for its space, shape and values only (false)",
    )
    spec_copy_of: int | None = Field(
        default=None,
        description="the learnware listed above it whose spec its own is near-identical to (cosine "
        f"≥ {DUPLICATE_COSINE}: a copy, or one of many alike); the shot check, the dock's or a client's "
        "(`pavedock task --local`), runs one of each such group, so copies cannot fill it",
    )
    reason: str = Field(default="", description="why it ranks where it does, in one line")
    tags: list[str]


class TaskSubmitted(BaseModel):
    task_id: int
    job_id: int
    status: TaskStatus
    spec_stored: str | None = Field(
        default=None, description='an uploaded spec\'s stored form: "sign-bits" (packed) or "float32"'
    )


class TaskRead(BaseModel):
    id: int
    status: TaskStatus
    label_names: list[str]
    n_examples: int
    space_id: str
    top_k: int
    spec_id: int | None
    job_id: int | None
    matches: list[MatchRead]
    index_version: int | None = Field(description="the index version the matches were ranked against")
    error: str | None
    examples_kept: bool
    created_at: datetime
    identified_at: datetime | None


class IdentifyResult(BaseModel):
    space_id: str
    spec_received: str = Field(description='the upload\'s form: "float32" values or "sign-bits" (packed U8)')
    space_encoding: str = Field(
        description='how the space stores and indexes its specs: "sign-bits" or "float32"'
    )
    index_version: int
    matches: list[MatchRead]
