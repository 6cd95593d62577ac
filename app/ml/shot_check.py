"""One learnware of the shot check: its loaded model run on the user's examples and scored.

The dock's worker (`app.tasks.shot_check`) runs it on a package it extracted from its store; a
client checking the matches of a spec-only task on the user's own machine
(`app.client.DockClient.check_here`) on a package it downloaded. Both get the same map and score.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from app.ml.errors import InvalidInput
from app.ml.label_maps import LabelMap
from app.ml.ranking import ShotScore, check_predicted

if TYPE_CHECKING:
    from app.ml.runners.base import Runner
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
