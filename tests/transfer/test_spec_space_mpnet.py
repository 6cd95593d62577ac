"""A second base gets its own spec space: the MPNet family places LoRA on q/v, its specs have
their own size and id, and specs of the BERT space refuse to be compared with them."""

from __future__ import annotations

import numpy as np
import pytest

from app.ml.errors import IncompatibleSpec
from app.ml.identify import SpecIndex
from app.ml.pave import fit_pave_spec
from app.ml.spec_space import SpecSpaceConfig, load_space
from tests.fixtures.tiny_bases import LABEL_NAMES, TinyBases


def test_an_mpnet_base_has_its_own_spec_space(tiny: TinyBases) -> None:
    mpnet = load_space(SpecSpaceConfig(base=str(tiny.mpnet), rank=2))
    bert = load_space(SpecSpaceConfig(base=str(tiny.bert), rank=2))
    assert mpnet.id != bert.id
    # LoRA on the q and v projections of each of the 3 MPNet layers: 6 B matrices of 48 × 2.
    assert mpnet.dim == 3 * 2 * 48 * 2
    assert all(name.endswith((".q", ".v")) for name in mpnet.describe()["layers"])

    labels = np.asarray(tiny.labels[:16])
    spec = fit_pave_spec(mpnet, tiny.texts[:16], labels, LABEL_NAMES, kind="task")
    again = fit_pave_spec(mpnet, tiny.texts[:16], labels, LABEL_NAMES, kind="task")
    assert spec.space_id == mpnet.id and spec.vector.shape == (mpnet.dim,)
    assert np.isfinite(spec.vector).all() and np.abs(spec.vector).sum() > 0
    np.testing.assert_array_equal(spec.vector, again.vector)

    other = fit_pave_spec(bert, tiny.texts[:16], labels, LABEL_NAMES, kind="model")
    index = SpecIndex(bert.id, bert.dim)
    index.add([1], other.vector[None, :], space_id=other.space_id)
    with pytest.raises(IncompatibleSpec):
        index.search(spec.vector, 1, space_id=spec.space_id)
