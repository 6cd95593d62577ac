"""PAVE Dock: a learnware dock where learnware = model + PAVE specification."""

__version__ = "0.1.0"
