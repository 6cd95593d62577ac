"""A Python client for the dock's API (``pavedock`` commands are built on it).

    with DockClient("http://127.0.0.1:8000", api_key) as dock:
        sub = dock.submit(Path("my-learnware.zip"))
        dock.wait(sub.job_id, progress=print)
        task = dock.task(texts, labels, label_names, local_spec=True)   # examples stay here
        print(dock.wait_task(task.task_id).matches)

``local_spec=True`` fits the task spec on this machine in the dock's spec space (fetched from
``/v1/spec-spaces``) and uploads only the spec: the raw examples never leave the machine.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import httpx
from pydantic import BaseModel

from app.auth.schemas import KeyIssued, KeyRead
from app.jobs.schemas import JobPage, JobRead, JobSubmitted
from app.learnwares.schemas import LearnwareRead, LearnwareSubmitted, Page
from app.ml.progress import Progress
from app.reuse.schemas import (
    FinetuneCreate,
    MergeCreate,
    MergeMethodRead,
    ReuseSubmitted,
    TaskReuseCreate,
    TaskReuseSubmitted,
    TransferCreate,
)
from app.spec_spaces.schemas import SpecSpaceRead
from app.tasks.schemas import IdentifyResult, MatchRead, TaskRead, TaskSubmitted

if TYPE_CHECKING:
    from app.ml.runners.base import Runner
    from app.ml.spec_space import SpecSpace

M = TypeVar("M", bound=BaseModel)
TERMINAL_STATES = ("succeeded", "failed", "cancelled")


def _label_ids(labels: Sequence[int] | Sequence[str], names: Sequence[str]) -> list[int]:
    """Labels as class ids: a name is looked up in ``names``, a number taken as the id."""
    names = list(names)
    out = []
    for label in labels:
        if isinstance(label, str):
            if label not in names:
                raise ValueError(f"label {label!r} is not one of the label names {names}")
            out.append(names.index(label))
        else:
            if not 0 <= int(label) < len(names):
                raise ValueError(f"label {label} is out of range for {len(names)} label names")
            out.append(int(label))
    return out


@dataclass(frozen=True)
class LocalCheck:
    """A task's matches re-ranked after the shot check ran on this machine (`DockClient.check_here`)."""

    matches: list[MatchRead]
    """Every match, in the order the API documents, the checked ones with their map and score."""
    checked: list[int]
    """The learnwares run on the examples."""
    skipped: dict[int, str]
    """Those that were to be run but could not be (download, package or map), with why."""


class DockAPIError(Exception):
    """An error answer of the dock: HTTP status, stable code and message."""

    def __init__(self, status: int, code: str, message: str):
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message


class DockClient:
    def __init__(
        self,
        base_url: str,
        api_key: str | None,
        *,
        timeout: float = 120.0,
        transport: httpx.BaseTransport | None = None,
    ):
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.http = httpx.Client(
            base_url=base_url.rstrip("/"), headers=headers, timeout=timeout, transport=transport
        )

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> DockClient:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # -- plumbing ----------------------------------------------------------------------------

    def _raise_for(self, response: httpx.Response) -> None:
        if response.status_code < 400:
            return
        try:
            error = response.json()["error"]
            code, message = str(error["code"]), str(error["message"])
        except (ValueError, KeyError, TypeError):
            code, message = "http_error", response.text[:500]
        raise DockAPIError(response.status_code, code, message)

    def _call(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        response = self.http.request(method, path, **kwargs)
        self._raise_for(response)
        return response

    def _model(self, model: type[M], method: str, path: str, **kwargs: Any) -> M:
        return model.model_validate(self._call(method, path, **kwargs).json())

    # -- learnwares -------------------------------------------------------------------------------

    def submit(self, package: Path, spec: Path | None = None) -> LearnwareSubmitted:
        """Upload a package zip (and optionally a spec computed locally: ``<stem>.safetensors``)."""
        with Path(package).open("rb") as pkg:
            files: dict[str, Any] = {"package": (Path(package).name, pkg, "application/zip")}
            if spec is None:
                return self._model(LearnwareSubmitted, "POST", "/v1/learnwares", files=files)
            with Path(spec).with_suffix(".safetensors").open("rb") as spec_fh:
                files["spec"] = ("spec.safetensors", spec_fh, "application/octet-stream")
                return self._model(LearnwareSubmitted, "POST", "/v1/learnwares", files=files)

    def learnwares(self, **filters: Any) -> Page[LearnwareRead]:
        params = {k: v for k, v in filters.items() if v is not None}
        return Page[LearnwareRead].model_validate(self._call("GET", "/v1/learnwares", params=params).json())

    def learnware(self, learnware_id: int) -> LearnwareRead:
        return self._model(LearnwareRead, "GET", f"/v1/learnwares/{learnware_id}")

    def delete(self, learnware_id: int) -> LearnwareRead:
        return self._model(LearnwareRead, "DELETE", f"/v1/learnwares/{learnware_id}")

    def download(self, learnware_id: int, dest: Path) -> Path:
        """Stream the package to ``dest`` (a file, or a folder to put ``learnware-<id>.zip`` in),
        checking its sha256 against the dock's."""
        dest = Path(dest)
        if dest.is_dir():
            dest = dest / f"learnware-{learnware_id}.zip"
        digest = hashlib.sha256()
        tmp = dest.with_name(f".{dest.name}.partial")
        with self.http.stream("GET", f"/v1/learnwares/{learnware_id}/package") as response:
            if response.status_code >= 400:
                response.read()
                self._raise_for(response)
            expected = response.headers.get("X-Content-SHA256")
            with tmp.open("wb") as out:
                for chunk in response.iter_bytes():
                    digest.update(chunk)
                    out.write(chunk)
        if expected and digest.hexdigest() != expected:
            tmp.unlink(missing_ok=True)
            raise DockAPIError(
                502, "corrupt_download", f"downloaded sha256 {digest.hexdigest()} != {expected}"
            )
        tmp.replace(dest)
        return dest

    # -- tasks --------------------------------------------------------------------------------

    def spec_spaces(self) -> list[SpecSpaceRead]:
        return [SpecSpaceRead.model_validate(s) for s in self._call("GET", "/v1/spec-spaces").json()]

    def default_space(self) -> SpecSpaceRead:
        spaces = self.spec_spaces()
        return next((s for s in spaces if s.default), spaces[0])

    def compute_task_spec(
        self,
        texts: Sequence[str],
        labels: Sequence[int] | Sequence[str],
        label_names: Sequence[str],
        out_stem: Path,
        *,
        progress: Progress | None = None,
    ) -> Path:
        """Fit the task spec here, in the dock's default space; returns ``<out_stem>.safetensors``."""
        import numpy as np

        from app.ml.pave import fit_pave_spec

        space = self._local_space()
        names = list(label_names)
        ids = _label_ids(labels, names)
        spec = fit_pave_spec(space, list(texts), np.asarray(ids), names, kind="task", progress=progress)
        tensors, _meta = spec.save(Path(out_stem))
        return tensors

    def _local_space(self) -> SpecSpace:
        """The dock's default spec space, loaded here (the same frozen base, checked by its id)."""
        from app.ml.spec_space import config_from_dict, load_space

        remote = self.default_space()
        space = load_space(config_from_dict(remote.config))
        if space.id != remote.id:
            raise DockAPIError(
                409,
                "incompatible_spec",
                f"the local space is {space.id}, the dock's is {remote.id}: the base model's weights differ",
            )
        return space

    def check_here(
        self,
        result: TaskRead,
        texts: Sequence[str],
        labels: Sequence[int] | Sequence[str],
        *,
        k: int | None = None,
        k_unnamed: int | None = None,
        progress: Progress | None = None,
    ) -> LocalCheck:
        """The shot check the dock's worker runs, run on this machine: for a task posted as a spec
        only (``local_spec=True``), whose examples the dock never saw and so could not check.

        The first ``k`` matches that can answer (``k_unnamed`` where none answers the labels by
        name; by default as many as the worker runs, `SHOT_CHECK_K` and `SHOT_CHECK_K_UNNAMED`)
        are downloaded (sha256 checked), extracted with the dock's own checks, loaded from their
        weights alone (safetensors or ONNX; no code runs) and run on the examples; then every
        match is re-ranked in the order the API documents (`MatchRead`), each with its label map
        and reason. A match that cannot be downloaded or run stays unchecked, with the reason in
        `LocalCheck.skipped`. ``progress(done, total, what)`` is called per learnware."""
        import numpy as np

        from app.ml.agreement import (
            AGREEMENT_INPUTS,
            agreement_scores,
            checked_peers,
            mapped_answers,
            pooled_inputs,
        )
        from app.ml.errors import InputError
        from app.ml.label_maps import LabelMap
        from app.ml.packages import extract_package
        from app.ml.ranking import (
            SHOT_CHECK_K,
            SHOT_CHECK_K_UNNAMED,
            Candidate,
            ShotScore,
            check_count,
            choose_checked,
            rank_for_task,
        )
        from app.ml.runners import load_runner
        from app.ml.shot_check import check_runner

        names = list(result.label_names)
        if not names:
            raise ValueError("the task has no label names: there is nothing to check its matches against")
        if any(m.checked for m in result.matches):
            raise ValueError(f"task {result.id}'s matches were already checked by the dock")
        if len(texts) != len(labels):
            raise ValueError(f"{len(labels)} labels for {len(texts)} texts")
        truth = np.asarray(_label_ids(labels, names), dtype=np.int64)
        by_id = {m.learnware_id: m for m in result.matches}
        # The dock's order is its `by_tier` order for a task it could not check, which is what
        # `choose_checked` and `rank_for_task` take.
        candidates = [
            Candidate(m.learnware_id, m.score, tuple(m.label_names), aligned=m.aligned)
            for m in result.matches
        ]
        count = check_count(
            candidates,
            names,
            SHOT_CHECK_K if k is None else k,
            SHOT_CHECK_K_UNNAMED if k_unnamed is None else k_unnamed,
        )
        # The dock marks the matches whose specs are near-identical (`spec_copy_of`): one of each
        # group is run, as in the dock's own check, so a flood of copies cannot fill this one.
        copies = {m.learnware_id: m.spec_copy_of for m in result.matches if m.spec_copy_of is not None}
        chosen = choose_checked(candidates, names, {}, count, copies=copies)
        if not chosen:
            return LocalCheck(matches=list(result.matches), checked=[], skipped={})
        space = self._local_space()
        maps: dict[int, LabelMap | None] = {}
        shots: dict[int, ShotScore | None] = {}
        skipped: dict[int, str] = {}
        loaded: dict[int, tuple[Runner, list[str]]] = {}  # each checked model and its first declared inputs
        with tempfile.TemporaryDirectory(prefix="pavedock-check-") as tmp:
            for done, learnware_id in enumerate(chosen, start=1):
                if progress is not None:
                    progress(done - 1, len(chosen), by_id[learnware_id].name)
                try:
                    zip_path = self.download(learnware_id, Path(tmp))
                    package = extract_package(zip_path, Path(tmp) / f"learnware-{learnware_id}")
                    runner = load_runner(package)
                    maps[learnware_id], shots[learnware_id] = check_runner(runner, texts, truth, names, space)
                    loaded[learnware_id] = (runner, list(package.inputs[:AGREEMENT_INPUTS]))
                except (DockAPIError, InputError, OSError, RuntimeError, ValueError) as error:
                    skipped[learnware_id] = str(error)
            if progress is not None:
                progress(len(chosen), len(chosen), "done")
        # The dock's agreement check (its order of a spec-only task's close matches) stands for
        # those not run here; the first checked matches here are scored by their agreement with
        # one another, added to their scores, as the dock's worker would
        # (`app.ml.agreement.checked_peers`, `ranking.weighed_by_agreement`).
        agreement = {
            m.learnware_id: m.agreement
            for m in result.matches
            if m.agreement is not None and m.learnware_id not in shots
        }
        ranked = rank_for_task(candidates, names, maps=maps, shots=shots, agreement=agreement)
        if peers := [i for i in checked_peers(ranked, SHOT_CHECK_K if k is None else k) if i in loaded]:
            pooled = pooled_inputs([loaded[i][1] for i in peers])
            answered = {}
            for i in peers:
                label_map = maps[i]
                if label_map is not None:
                    predicted = loaded[i][0].predict(pooled)
                    answered[i] = mapped_answers(predicted.labels, predicted.probs, label_map)
            agreement.update(agreement_scores(answered, len(names)))
            ranked = rank_for_task(candidates, names, maps=maps, shots=shots, agreement=agreement)
        matches = [
            MatchRead.model_validate(
                {
                    **by_id[r.id].model_dump(),
                    **r.fields(names, by_id[r.id].label_names, len(texts)),
                    "rank": rank,
                }
            )
            for rank, r in enumerate(ranked, start=1)
        ]
        return LocalCheck(matches=matches, checked=[i for i in chosen if i in shots], skipped=skipped)

    def task(
        self,
        texts: Sequence[str],
        labels: Sequence[int] | Sequence[str],
        label_names: Sequence[str],
        *,
        top_k: int = 10,
        local_spec: bool = False,
        progress: Progress | None = None,
    ) -> TaskSubmitted:
        """Post a few-shot task. ``local_spec``: fit the spec here and upload only the spec."""
        if not local_spec:
            body = {
                "texts": list(texts),
                "labels": list(labels),
                "label_names": list(label_names),
                "top_k": top_k,
            }
            return self._model(TaskSubmitted, "POST", "/v1/tasks", json=body)
        with tempfile.TemporaryDirectory(prefix="pavedock-task-") as tmp:
            spec_path = self.compute_task_spec(
                texts, labels, label_names, Path(tmp) / "task", progress=progress
            )
            return self.task_from_spec(spec_path, top_k=top_k, label_names=label_names)

    def task_from_spec(
        self, spec: Path, *, top_k: int = 10, label_names: Sequence[str] = ()
    ) -> TaskSubmitted:
        with Path(spec).with_suffix(".safetensors").open("rb") as fh:
            return self._model(
                TaskSubmitted,
                "POST",
                "/v1/tasks/spec",
                files={"spec": ("spec.safetensors", fh, "application/octet-stream")},
                data={"top_k": str(top_k), "label_names": json.dumps(list(label_names))},
            )

    def task_result(self, task_id: int) -> TaskRead:
        return self._model(TaskRead, "GET", f"/v1/tasks/{task_id}")

    def wait_task(
        self, task_id: int, *, timeout: float = 600.0, progress: Callable[[JobRead], None] | None = None
    ) -> TaskRead:
        """Wait for the task's job, then return the task with its ranked learnwares."""
        task = self.task_result(task_id)
        if task.job_id is not None:
            self.wait(task.job_id, timeout=timeout, progress=progress)
        return self.task_result(task_id)

    def identify(self, spec: Path, *, k: int = 10) -> IdentifyResult:
        """Rank learnwares for a spec right away (nothing stored)."""
        with Path(spec).with_suffix(".safetensors").open("rb") as fh:
            return self._model(
                IdentifyResult,
                "POST",
                "/v1/identify",
                files={"spec": ("spec.safetensors", fh, "application/octet-stream")},
                data={"k": str(k)},
            )

    # -- jobs --------------------------------------------------------------------------------

    def job(self, job_id: int) -> JobRead:
        return self._model(JobRead, "GET", f"/v1/jobs/{job_id}")

    def jobs(self, *, state: str | None = None, kind: str | None = None, limit: int = 50) -> JobPage:
        params = {k: v for k, v in {"state": state, "kind": kind, "limit": limit}.items() if v is not None}
        return self._model(JobPage, "GET", "/v1/admin/jobs", params=params)

    def cancel(self, job_id: int) -> JobRead:
        return self._model(JobRead, "POST", f"/v1/jobs/{job_id}/cancel")

    def retry(self, job_id: int) -> JobRead:
        return self._model(JobRead, "POST", f"/v1/admin/jobs/{job_id}/retry")

    def rebuild_index(self, space_id: str) -> JobSubmitted:
        return self._model(JobSubmitted, "POST", f"/v1/admin/spec-spaces/{space_id}/rebuild")

    def follow(self, job_id: int, *, timeout: float = 600.0) -> Iterator[JobRead]:
        """The job's server-sent events, until it ends (or ``timeout``)."""
        deadline = time.monotonic() + timeout
        with self.http.stream(
            "GET", f"/v1/jobs/{job_id}/events", timeout=httpx.Timeout(30.0, read=60.0)
        ) as response:
            if response.status_code >= 400:
                response.read()
                self._raise_for(response)
            event, data = "", []
            for line in response.iter_lines():
                if time.monotonic() > deadline:
                    raise TimeoutError(f"job {job_id} did not finish in {timeout:.0f} s")
                if line.startswith("event:"):
                    event = line[6:].strip()
                elif line.startswith("data:"):
                    data.append(line[5:].strip())
                elif not line and data:
                    if event == "job":
                        yield JobRead.model_validate_json("\n".join(data))
                    event, data = "", []

    def wait(
        self, job_id: int, *, timeout: float = 600.0, progress: Callable[[JobRead], None] | None = None
    ) -> JobRead:
        """Follow a job until it ends; returns its last state (check ``state`` and ``error``)."""
        deadline = time.monotonic() + timeout
        last: JobRead | None = None
        while True:
            try:
                for job in self.follow(job_id, timeout=max(1.0, deadline - time.monotonic())):
                    last = job
                    if progress:
                        progress(job)
                    if job.state in TERMINAL_STATES:
                        return job
            except httpx.TransportError:
                pass  # the stream broke (an API restart): poll, then follow again
            last = self.job(job_id)
            if last.state in TERMINAL_STATES:
                return last
            if time.monotonic() > deadline:
                raise TimeoutError(f"job {job_id} is still {last.state} after {timeout:.0f} s")
            time.sleep(1.0)

    # -- reuse -------------------------------------------------------------------------------

    def merge_methods(self) -> list[MergeMethodRead]:
        response = self._call("GET", "/v1/merge-methods")
        return [MergeMethodRead.model_validate(m) for m in response.json()]

    def merge(self, body: MergeCreate) -> ReuseSubmitted:
        """Merge LoRA learnwares; the job's result names the new learnware."""
        return self._model(ReuseSubmitted, "POST", "/v1/merges", json=body.model_dump(mode="json"))

    def finetune(self, body: FinetuneCreate) -> ReuseSubmitted:
        """Fine-tune a LoRA learnware on shots (PAVE♦); held-out accuracy in the job's result."""
        return self._model(ReuseSubmitted, "POST", "/v1/finetunes", json=body.model_dump(mode="json"))

    def transfer(self, body: TransferCreate) -> ReuseSubmitted:
        """Move a LoRA learnware onto another registered base."""
        return self._model(ReuseSubmitted, "POST", "/v1/transfers", json=body.model_dump(mode="json"))

    def reuse_task(self, task_id: int, body: TaskReuseCreate) -> TaskReuseSubmitted:
        """Fine-tune a ready task's top adapter and merge its top k into private learnwares."""
        return self._model(
            TaskReuseSubmitted, "POST", f"/v1/tasks/{task_id}/reuse", json=body.model_dump(mode="json")
        )

    # -- keys --------------------------------------------------------------------------------

    def me(self) -> KeyRead:
        return self._model(KeyRead, "GET", "/v1/keys/me")

    def create_key(self, role: str, name: str, *, expires_in_days: float | None = None) -> KeyIssued:
        body = {"role": role, "name": name, "expires_in_days": expires_in_days}
        return self._model(KeyIssued, "POST", "/v1/admin/keys", json=body)

    def list_keys(self) -> list[KeyRead]:
        return [KeyRead.model_validate(k) for k in self._call("GET", "/v1/admin/keys").json()]

    def revoke_key(self, key_id: int) -> KeyRead:
        return self._model(KeyRead, "DELETE", f"/v1/admin/keys/{key_id}")

    # -- health ------------------------------------------------------------------------------

    def ready(self) -> dict[str, Any]:
        response = self.http.get("/readyz")
        body: dict[str, Any] = response.json()
        return body
