"""How long work reports how far it is: ``progress(done, total, message)``.

Fitting, training, merging, transfer and the installers take one; a job passes its
``JobContext.scaled`` slice, the CLI a progress bar, a test ``lambda *_: None``.
"""

from __future__ import annotations

from collections.abc import Callable

Progress = Callable[[int, int, str], None]
