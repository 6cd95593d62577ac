"""Bodies of the reuse endpoints. Each job's result names the new learnware it registered."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field, model_validator

from app.api.types import ClassId, Id, Json, Label, Name, Seed, Shot, Text

PRIVATE = (
    "private learnwares are seen by their owner alone and never indexed. A user key's results are "
    "always private (omitted: private); publishing one (false) takes a developer or admin key, whose "
    "results are public unless true"
)


class Shots(BaseModel):
    """Labelled examples (class ids or names into ``label_names``)."""

    texts: list[Shot] = Field(min_length=2, max_length=2000)
    labels: list[ClassId] | list[Label] = Field(min_length=2, max_length=2000)
    label_names: list[Label] = Field(min_length=2, max_length=1000)

    @model_validator(mode="after")
    def _same_length(self) -> Shots:
        if len(self.texts) != len(self.labels):
            raise ValueError(f"{len(self.labels)} labels for {len(self.texts)} texts")
        return self


class MergeCreate(BaseModel):
    """Merge LoRA learnwares of one base into one new learnware."""

    learnware_ids: list[Id] = Field(min_length=2, max_length=16)
    method: Text = Field(
        max_length=64, description="a merge method: GET /v1/merge-methods lists them with their parameters"
    )
    params: Json = Field(default_factory=dict)
    name: Name | None = None
    private: bool | None = Field(default=None, description=PRIVATE)
    eval: Shots | None = Field(default=None, description="shots to report the merged model's accuracy on")


class FinetuneCreate(Shots):
    """Fine-tune a LoRA learnware on your shots (PAVE♦), holding some out to measure."""

    learnware_id: Id
    steps: int = Field(default=30, ge=1, le=1000)
    holdout: float = Field(default=0.25, ge=0.0, lt=1.0)
    name: Name | None = None
    private: bool = Field(
        default=True,
        description="a fine-tune is private unless false; publishing one takes a developer or admin key",
    )
    seed: Seed = 0


class TransferCreate(BaseModel):
    """Move a LoRA learnware onto another registered base, calibrated on a few inputs."""

    learnware_id: Id
    target_base: Text = Field(min_length=1, max_length=256)
    method: Text = Field(default="bico", max_length=64)
    params: Json = Field(default_factory=dict)
    texts: list[Shot] = Field(min_length=2, max_length=2000, description="calibration inputs")
    labels: list[ClassId] | list[Label] | None = Field(
        default=None, description="their labels; omitted: the learnware's own predictions are used"
    )
    name: Name | None = None
    private: bool | None = Field(default=None, description=PRIVATE)

    @model_validator(mode="after")
    def _same_length(self) -> TransferCreate:
        if self.labels is not None and len(self.labels) != len(self.texts):
            raise ValueError(f"{len(self.labels)} labels for {len(self.texts)} texts")
        return self


class TaskReuseCreate(Shots):
    """Reuse what a task identified: fine-tune its top adapter (PAVE♦) and merge its top ``merge_k``.

    The shots are sent again (the dock erases a task's examples once its spec is fitted). One
    seeded, stratified part is held out, so both results and the top-1 used as it is are measured
    on the same examples.
    """

    finetune: bool = Field(default=True, description="fine-tune the top-ranked adapter learnware")
    finetune_steps: int = Field(default=30, ge=1, le=1000)
    merge_k: int = Field(default=3, ge=0, le=16, description="merge the top k adapters; 0 or 1: no merge")
    merge_method: Text = Field(default="iso_c", max_length=64, description="GET /v1/merge-methods lists them")
    merge_params: Json = Field(default_factory=dict)
    holdout: float = Field(default=0.25, gt=0.0, lt=1.0)
    seed: Seed = 0


class ReuseChoice(BaseModel):
    job_id: int
    kind: str
    learnware_ids: list[int] = Field(description="the learnwares it starts from, best ranked first")
    ranks: list[int] = Field(description="their ranks in the task's results")


class TaskReuseSubmitted(BaseModel):
    task_id: int
    finetune: ReuseChoice | None
    merge: ReuseChoice | None
    skipped: list[str] = Field(description="why a part asked for was not started")


class ReuseSubmitted(BaseModel):
    job_id: int
    kind: str


class MergeMethodRead(BaseModel):
    name: str
    help: str
    params: dict[str, Any]
