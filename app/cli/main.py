"""``pavedock``: the dock's command line. Each domain adds its commands from its own module."""

from __future__ import annotations

import logging
import os

import typer

from app.cli import bench, client, database, demo, jobs, keys, ml, package, reuse, server

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

app = typer.Typer(no_args_is_help=True, add_completion=False, help="PAVE Dock: a learnware dock.")
# In the order of `pavedock --help`: the engine, the service, reuse, packaging, the benchmarks.
for commands in (ml, server, database, keys, client, jobs, reuse, package, demo, bench):
    commands.register(app)


def main() -> None:
    import warnings

    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # the dock draws its own progress bars
    warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
    from app.ml.bases import use_data_dir
    from app.ml.threads import use_torch_threads
    from app.settings import get_settings

    use_data_dir(get_settings().data_dir)  # where `bases install` puts bases and commands find them
    use_torch_threads(get_settings().torch_threads)  # the engine's and the benchmarks' commands
    logging.basicConfig(
        level=(get_settings().log_level or "WARNING").upper(), format="%(levelname)s %(name)s: %(message)s"
    )
    app()


if __name__ == "__main__":
    main()
