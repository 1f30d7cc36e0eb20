"""kit.redact: a URL named in a repr, a record or a page keeps no secret of its own."""

from __future__ import annotations

import pytest

from ctxwindow import Option
from ctxwindow.kit import redact
from ctxwindow.testing.strategies import Newest


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://example.com/v1", "https://example.com/v1"),
        ("https://user:pw@example.com/v1", "https://user:***@example.com/v1"),
        ("redis://:pw@cache:6379/0", "redis://:***@cache:6379/0"),
        ("https://TOKEN@example.com/v1", "https://***@example.com/v1"),
        ("https://example.com/v1?key=SECRET", "https://example.com/v1?key=***"),
        (
            "https://example.com/v1?api-version=1&SECRET",
            "https://example.com/v1?api-version=***&***",
        ),
        (
            "https://u:p@example.com/v1?password=pw#token=SECRET",
            "https://u:***@example.com/v1?password=***#***",
        ),
        ("unix:///run/redis.sock?db=0", "unix:///run/redis.sock?db=***"),
    ],
)
def test_redact_masks_user_info_query_and_fragment(url: str, shown: str) -> None:
    assert redact(url) == shown


def test_a_strategys_repr_keeps_no_key_from_a_url_query() -> None:
    """A key in a base URL's query string (``?key=...``, as some gateways take it)."""

    class Remote(Newest):
        name = "remote"
        option_specs = (Option("endpoint", str, "", "Where the model is served."),)

    shown = repr(Remote(endpoint="https://u:pw@example.com/v1?key=SECRET"))
    assert shown == "Remote(endpoint='https://u:***@example.com/v1?key=***')"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://:abc/SECRET@localhost:6392/0", "redis://:***@localhost:6392/0"),
        ("redis://:abc#SECRET@localhost:6392/0", "redis://:***@localhost:6392/0"),
        ("redis://:abc?SECRET@localhost:6392/0", "redis://:***@localhost:6392/0"),
        ("redis://user:a:b/c@d@[::1]:6379/0?db=1", "redis://user:***@[::1]:6379/0?db=***"),
        ("https://:TOK/EN@example.com/v1", "https://:***@example.com/v1"),
        ("https://u:abc/SECRET@example.com/v1?q=a@b", "https://u:***@example.com/v1?q=***"),
        ("unix://:abc/SECRET@/run/redis.sock?db=0", "unix://:***@/run/redis.sock?db=***"),
        ("//u:abc/SECRET@example.com/v1", "//u:***@example.com/v1"),
    ],
)
def test_redact_masks_user_info_holding_url_delimiters(url: str, shown: str) -> None:
    """A password with an unencoded '/', '#' or '?' ends a parser's host part early: the
    user info runs to the last '@' followed by a host, and is masked whole."""
    assert redact(url) == shown
    assert "abc" not in redact(url) and "SECRET" not in redact(url)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (
            "https://api.example.com/v1?user=me@corp.com&api_key=SECRET",
            "https://api.example.com/v1?user=***&api_key=***",
        ),
        (
            "http://10.0.0.5:8080/v1/deployments/gpt@2024",
            "http://10.0.0.5:8080/v1/deployments/gpt@2024",
        ),
        ("http://[::1]:8080/v1?u=a@b", "http://[::1]:8080/v1?u=***"),
        (
            "redis://cache.internal:6379/0?client_name=api@eu",
            "redis://cache.internal:6379/0?client_name=***",
        ),
        ("unix:///run/redis@main/redis.sock?db=2", "unix:///run/redis@main/redis.sock?db=***"),
    ],
)
def test_an_at_sign_after_a_host_is_no_user_info(url: str, shown: str) -> None:
    """An '@' in a path or a query, after a host: the host is shown and the query's
    values masked (the user info's search once ran to the last '@' of the whole URL,
    hiding the host and showing the key after it)."""
    assert redact(url) == shown
