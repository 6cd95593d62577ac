"""Method parameters declared as data: one `ParamSpec` per knob, validated in one place, for the
merge methods (``app.ml.merging.registry``) and the transfer methods (``app.ml.transfer.registry``).

The API schema, the CLI help and the docs are all generated from these declarations, so a
parameter is described exactly once.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Literal

from app.ml.errors import InvalidInput

ParamKind = Literal["float", "int", "bool", "choice", "str"]
ParamValue = float | int | bool | str


@dataclass(frozen=True)
class ParamSpec:
    """One method parameter: its name, type, default, allowed range and a one-line help."""

    name: str
    kind: ParamKind
    default: ParamValue
    help: str
    low: float | None = None
    high: float | None = None
    low_inclusive: bool = True
    high_inclusive: bool = True
    choices: tuple[str, ...] = ()

    def range_text(self) -> str:
        """The allowed values in interval or set notation, e.g. `(0, 1]` or `{right, left}`."""
        if self.kind == "choice":
            return "{" + ", ".join(self.choices) + "}"
        if self.low is None and self.high is None:
            return "any"
        left = ("[" if self.low_inclusive else "(") + ("-inf" if self.low is None else f"{self.low:g}")
        right = ("inf" if self.high is None else f"{self.high:g}") + ("]" if self.high_inclusive else ")")
        return f"{left}, {right}"

    def validate(self, method: str, value: object) -> ParamValue:
        """Return `value` coerced to this parameter's type, or raise naming the bad value."""
        where = f"{method}: parameter {self.name}={value!r}"
        if self.kind == "bool":
            if not isinstance(value, bool):
                raise InvalidInput(f"{where} must be true or false")
            return value
        if self.kind in ("choice", "str"):
            if not isinstance(value, str):
                raise InvalidInput(f"{where} must be a string")
            if self.kind == "choice" and value not in self.choices:
                raise InvalidInput(f"{where} is not one of {self.range_text()}")
            return value
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise InvalidInput(f"{where} must be a number")
        if self.kind == "int":
            if isinstance(value, float) and not value.is_integer():
                raise InvalidInput(f"{where} must be an integer")
            number: float | int = int(value)
        else:
            number = float(value)
            if not math.isfinite(number):
                raise InvalidInput(f"{where} must be finite")
        too_low = self.low is not None and (
            number < self.low or (number == self.low and not self.low_inclusive)
        )
        too_high = self.high is not None and (
            number > self.high or (number == self.high and not self.high_inclusive)
        )
        if too_low or too_high:
            raise InvalidInput(f"{where} is out of range {self.range_text()}")
        return number

    def json_schema(self) -> dict[str, object]:
        """This parameter as a JSON Schema property."""
        schema: dict[str, object] = {"description": self.help, "default": self.default}
        if self.kind in ("float", "int"):
            schema["type"] = "number" if self.kind == "float" else "integer"
            if self.low is not None:
                schema["minimum" if self.low_inclusive else "exclusiveMinimum"] = self.low
            if self.high is not None:
                schema["maximum" if self.high_inclusive else "exclusiveMaximum"] = self.high
        elif self.kind == "bool":
            schema["type"] = "boolean"
        else:
            schema["type"] = "string"
            if self.choices:
                schema["enum"] = list(self.choices)
        return schema


class ResolvedParams(Mapping[str, ParamValue]):
    """Validated parameters with every default filled in, read through typed getters."""

    def __init__(self, method: str, values: Mapping[str, ParamValue]) -> None:
        self.method = method
        self._values = dict(values)

    def __getitem__(self, name: str) -> ParamValue:
        return self._values[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return f"ResolvedParams({self.method!r}, {self._values!r})"

    def get_float(self, name: str) -> float:
        """A numeric parameter as a float."""
        value = self._values[name]
        assert isinstance(value, int | float) and not isinstance(value, bool), name
        return float(value)

    def get_int(self, name: str) -> int:
        """An integer parameter."""
        value = self._values[name]
        assert isinstance(value, int) and not isinstance(value, bool), name
        return value

    def get_bool(self, name: str) -> bool:
        """A boolean parameter."""
        value = self._values[name]
        assert isinstance(value, bool), name
        return value

    def get_str(self, name: str) -> str:
        """A string or choice parameter."""
        value = self._values[name]
        assert isinstance(value, str), name
        return value


def resolve(method: str, specs: Iterable[ParamSpec], given: Mapping[str, object] | None) -> ResolvedParams:
    """Validate `given` against `specs`, fill in defaults, and reject names the method does not know."""
    by_name = {spec.name: spec for spec in specs}
    given = dict(given or {})
    unknown = sorted(set(given) - set(by_name))
    if unknown:
        raise InvalidInput(
            f"{method}: unknown parameter(s) {', '.join(unknown)}; known: {', '.join(sorted(by_name))}"
        )
    values: dict[str, ParamValue] = {}
    for name, spec in by_name.items():
        values[name] = spec.validate(method, given[name]) if name in given else spec.default
    return ResolvedParams(method, values)
