"""The core's own registrations: its token counters. The core ships no strategy."""

from __future__ import annotations

from ctxwindow.errors import InvalidOption
from ctxwindow.hookspecs import RegisterTokenCounter, hookimpl
from ctxwindow.tokens import ApproxCounter, hf_counter, tiktoken_counter


def approx_counter(argument: str | None) -> ApproxCounter:
    """``approx`` or ``approx:<characters per token>``."""
    if argument is None:
        return ApproxCounter()
    try:
        chars_per_token = float(argument)
    except ValueError:
        raise InvalidOption(
            f"approx counter: {argument!r} is not a number of characters per token"
        ) from None
    return ApproxCounter(chars_per_token=chars_per_token)


@hookimpl
def register_token_counters(register: RegisterTokenCounter) -> None:
    register("approx", approx_counter)
    register("tiktoken", tiktoken_counter)
    register("hf", hf_counter)
