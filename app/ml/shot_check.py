"""One learnware of the shot check: its loaded model run on the user's examples and scored.

The dock's worker (`app.tasks.shot_check`) runs it on a package it extracted from its store; a
client checking the matches of a spec-only task on the user's own machine
(`app.client.DockClient.check_here`) on a package it downloaded. Both get the same map and score.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from app.ml.errors import InvalidInput
from app.ml.label_maps import LabelMap
from app.ml.ranking import ShotScore, check_predicted

if TYPE_CHECKING:
    from app.ml.runners.base import Predictions, Runner
    from app.ml.spec_space import SpecSpace


def check_runner(
    runner: Runner,
    texts: Sequence[str],
    labels: np.ndarray,
    user_names: Sequence[str],
    space: SpecSpace,
) -> tuple[LabelMap, ShotScore]:
    """Run a loaded model on ``texts`` and score it against ``labels`` (ids into ``user_names``)
    under the label map the dock chooses (`check_predicted`, with ``space``'s names' similarity
    and head temperature). Raises InvalidInput when no map applies."""
    predicted = runner.predict(list(texts))
    model_names = list(runner.label_names)
    checked = check_predicted(
        user_names,
        model_names,
        predicted.labels,
        predicted.probs,
        labels,
        name_similarity=space.name_similarity,
        temperature=space.config.temperature,
    )
    if checked is None:
        raise InvalidInput(
            "it has fewer classes than the task's labels"
            if len(model_names) < len(user_names)
            else "no label map to go by (its labels are not the task's by name, and their meaning was not read)"
        )
    return checked


REMEMBERED_ANSWERS = 50_000
"""How many (model, declared input) answers a worker process keeps (`RememberedAnswers`): at most
about 30 MB where every model has 150 classes; a few hundred tasks' worth of agreement checks (a
memory cap, not a choice on any benchmark)."""


class RememberedAnswers:
    """What the models of this process answered on declared inputs they ran on, by model (its
    package digest in the worker) and text (least recently used out). The agreement checks of one
    family's tasks pool the same few hundred declared inputs of the same models task after task,
    and a model's answer to a text does not change: the second such task runs only what the first
    did not."""

    def __init__(self, capacity: int = REMEMBERED_ANSWERS) -> None:
        self._rows: OrderedDict[tuple[str, str], tuple[int, np.ndarray | None]] = OrderedDict()
        self._lock = threading.Lock()
        self.capacity = capacity

    def predict(self, model: str, runner: Runner, texts: Sequence[str]) -> Predictions:
        """``runner``'s predictions on ``texts``, running it only on those it has not answered;
        ``model`` names it (a package digest, a benchmark learnware's key)."""
        from app.ml.runners.base import Predictions  # torch-heavy: imported when run

        with self._lock:
            known = {t: self._rows[(model, t)] for t in texts if (model, t) in self._rows}
            for text in known:
                self._rows.move_to_end((model, text))
        missing = [t for t in dict.fromkeys(texts) if t not in known]
        if missing:
            fresh = runner.predict(missing)
            for i, text in enumerate(missing):
                known[text] = (
                    int(fresh.labels[i]),
                    None if fresh.probs is None else np.asarray(fresh.probs[i]),
                )
            with self._lock:
                for text in missing:
                    self._rows[(model, text)] = known[text]
                while len(self._rows) > self.capacity:
                    self._rows.popitem(last=False)
        labels = np.asarray([known[t][0] for t in texts], dtype=np.int64)
        rows = [known[t][1] for t in texts]
        probs = None if not rows or any(r is None for r in rows) else np.stack(rows)  # type: ignore[arg-type]
        return Predictions(labels, probs)

    def __len__(self) -> int:
        return len(self._rows)
