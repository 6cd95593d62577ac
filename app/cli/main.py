"""``pavedock``: the dock's command line. Each domain adds its commands from its own module."""

from __future__ import annotations

import logging
import os

import typer

from app.cli import ml, reuse, scale, service

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

app = typer.Typer(no_args_is_help=True, add_completion=False, help="PAVE Dock: a learnware dock.")
ml.register(app)
service.register(app)
reuse.register(app)
scale.register(app)


def main() -> None:
    import warnings

    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # the dock draws its own progress bars
    warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
    logging.basicConfig(
        level=os.environ.get("PAVEDOCK_LOG_LEVEL", "WARNING"), format="%(levelname)s %(name)s: %(message)s"
    )
    app()


if __name__ == "__main__":
    main()
