"""Declared strategy options, and the one validation used by config and constructors."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ctxwindow.errors import InvalidOption


@dataclass(frozen=True)
class Option:
    """One option a strategy accepts: its type, default, and what it is for."""

    name: str
    type: type | tuple[type, ...]
    default: Any
    help: str
    choices: tuple[Any, ...] | None = None
    minimum: float | None = None
    maximum: float | None = None
    nullable: bool = False
    check: Callable[[Any], str | None] | None = None

    @property
    def type_name(self) -> str:
        types = self.type if isinstance(self.type, tuple) else (self.type,)
        names = [t.__name__ for t in types]
        if self.nullable:
            names.append("None")
        return " | ".join(names)

    def validate(self, owner: str, value: Any) -> Any:
        """Return ``value`` if it fits this option, else raise InvalidOption saying why."""
        if value is None and self.nullable:
            return None
        types = self.type if isinstance(self.type, tuple) else (self.type,)
        if float in types and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if (isinstance(value, bool) and bool not in types) or not isinstance(value, types):
            raise InvalidOption(
                f"{owner}: option {self.name!r} expects {self.type_name}, "
                f"got {type(value).__name__} {value!r}"
            )
        if self.choices is not None and value not in self.choices:
            allowed = ", ".join(repr(choice) for choice in self.choices)
            raise InvalidOption(
                f"{owner}: option {self.name!r} must be one of {allowed}, got {value!r}"
            )
        number: Any = value
        if self.minimum is not None and number < self.minimum:
            raise InvalidOption(
                f"{owner}: option {self.name!r} must be >= {self.minimum}, got {value!r}"
            )
        if self.maximum is not None and number > self.maximum:
            raise InvalidOption(
                f"{owner}: option {self.name!r} must be <= {self.maximum}, got {value!r}"
            )
        if self.check is not None:
            problem = self.check(value)
            if problem:
                raise InvalidOption(f"{owner}: option {self.name!r} {problem}")
        return value

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "type": self.type_name,
            "default": self.default,
            "help": self.help,
            "choices": list(self.choices) if self.choices else None,
        }


def validate_options(
    owner: str, declared: Sequence[Option], given: Mapping[str, Any]
) -> dict[str, Any]:
    """Defaults filled in and every given option checked; unknown names list the valid ones."""
    by_name = {option.name: option for option in declared}
    unknown = sorted(set(given) - set(by_name))
    if unknown:
        valid = ", ".join(sorted(by_name)) or "none"
        raise InvalidOption(
            f"{owner}: unknown option(s) {', '.join(map(repr, unknown))}; valid options: {valid}"
        )
    return {
        name: option.validate(owner, given[name]) if name in given else option.default
        for name, option in by_name.items()
    }
