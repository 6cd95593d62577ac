"""User task bodies."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field, model_validator

from app.db.models import TaskStatus


class TaskCreate(BaseModel):
    """A few-shot task: texts, their labels (class ids or names) and the class names."""

    texts: list[str] = Field(min_length=2)
    labels: list[int] | list[str] = Field(min_length=2)
    label_names: list[str] = Field(min_length=2, max_length=1000)
    top_k: int = Field(default=10, ge=1, le=100)

    @model_validator(mode="after")
    def _same_length(self) -> TaskCreate:
        if len(self.texts) != len(self.labels):
            raise ValueError(f"{len(self.labels)} labels for {len(self.texts)} texts")
        return self


class MatchRead(BaseModel):
    rank: int
    learnware_id: int
    score: float = Field(description="cosine similarity of the learnware's spec and the task's spec")
    name: str
    task_type: str
    model_format: str
    label_names: list[str]
    labels_match: bool = Field(
        default=False, description="its label set is the task's (such learnwares are ranked first)"
    )
    shot_accuracy: float | None = Field(
        default=None,
        description="its accuracy on the task's own examples, where the shot check ran it (the "
        "checked matches are ranked by it); None where it was not run",
    )
    shot_confidence: float | None = Field(
        default=None,
        description="the mean probability it gave the true labels of the task's examples (the "
        "accuracy where the model gives no probabilities): orders checked matches of equal "
        "`shot_accuracy`; None where the shot check did not run it",
    )
    label_map: dict[str, str] | None = Field(
        default=None,
        description="when its label names are not the task's: the map of its labels onto the "
        "task's that fits the task's examples best (the shot check's accuracy is under this map)",
    )
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
