"""Declared strategy options, and the one validation used by config and constructors."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ctxwindow.errors import InvalidOption, PluginError, closest


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
            if isinstance(problem, bool):  # a yes/no predicate: its answer means nothing here
                raise PluginError(
                    f"{owner}: option {self.name!r}: its check returned {problem!r}; a check "
                    f"returns None when the value is fine, else a string saying what is wrong"
                )
            if problem:
                raise InvalidOption(f"{owner}: option {self.name!r} {problem}")
        if isinstance(number, float) and not math.isfinite(number):  # NaN passed the ranges
            raise InvalidOption(
                f"{owner}: option {self.name!r} must be a finite number, got {value!r}"
            )
        return value

    def describe(self) -> dict[str, Any]:
        """The option as data (for a form, say): the default is a copy, so that a caller
        who edits it does not change it for every strategy made after."""
        return {
            "name": self.name,
            "type": self.type_name,
            "default": owned(self.default),
            "help": self.help,
            "choices": list(self.choices) if self.choices else None,
            "minimum": self.minimum,
            "maximum": self.maximum,
        }


def validate_options(
    owner: str, declared: Sequence[Option], given: Mapping[str, Any]
) -> dict[str, Any]:
    """Defaults filled in and every given option checked; unknown names list the valid ones.

    A list or dict among them is the strategy's own copy: neither the declared default
    (one object for the whole process) nor the caller's list, which either one could
    change after."""
    by_name = {option.name: option for option in declared}
    unknown = sorted(set(given) - set(by_name))
    if unknown:
        valid = ", ".join(sorted(by_name)) or "none"
        raise InvalidOption(
            f"{owner}: unknown option(s) {', '.join(map(repr, unknown))}; valid options: {valid}"
            + suggestions(unknown, by_name)
        )
    return {
        name: owned(option.validate(owner, given[name]) if name in given else option.default)
        for name, option in by_name.items()
    }


def owned(value: Any) -> Any:
    """``value`` with its lists, dicts and sets copied, nested ones (in a tuple too)
    included: an option's value is JSON-like data, such as a list of stage tables.
    Anything else is itself."""
    kind = type(value)
    if kind is list:
        return [owned(item) for item in value]
    if kind is dict:
        return {key: owned(item) for key, item in value.items()}
    if kind is tuple:  # of stage tables, say: the tables are copied
        return tuple(owned(item) for item in value)
    if kind is set:
        return set(value)
    return value


def suggestions(unknown: Sequence[object], valid: Iterable[str]) -> str:
    """``"; did you mean 'max_messages'?"`` for the unknown names that are close to a
    valid one (with several, which is meant for which), else ``""``."""
    names = list(valid)
    pairs = [(name, closest(name, names)) for name in unknown]
    found = [(name, match) for name, match in pairs if match]
    if not found:
        return ""
    if len(unknown) == 1:
        return f"; did you mean {found[0][1]!r}?"
    return "; did you mean " + ", ".join(f"{m!r} for {n!r}" for n, m in found) + "?"
