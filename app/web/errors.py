"""A form error that names its field, so the page shows it beside that field."""

from __future__ import annotations

from app.ml.errors import InvalidInput


class FieldError(InvalidInput):
    """Bad input in one form field (a 422, as the API answers it)."""

    def __init__(self, message: str, field: str):
        super().__init__(message)
        self.field = field
