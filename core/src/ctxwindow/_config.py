"""Selection by name from config (a dict, a ctxwindow.toml, or [tool.ctxwindow]), and
the one-call API built on it.

The same checks apply whether a strategy comes from config or is built in Python:
both go through the strategy's own option validation.
"""

from __future__ import annotations

import copy
import sys
import threading
from collections import OrderedDict
from collections.abc import Hashable, Mapping, Sequence
from os import PathLike
from typing import TYPE_CHECKING, Any, overload

from ctxwindow._contract import HOST_KEYS, check_budget, declared_options
from ctxwindow._messages import Message
from ctxwindow._options import suggestions
from ctxwindow._plugins import (
    Registered,
    build_strategy,
    config_tables,
    get_counter,
    strategy_entry,
)
from ctxwindow._tokens import TokenCounter
from ctxwindow._window import Window
from ctxwindow._windower import Windower
from ctxwindow.errors import ConfigError, CtxWindowError, InvalidOption

if TYPE_CHECKING:
    from pathlib import Path

#: Visit bounds: a strategy built on BaseStrategy takes them as options; for any other
#: strategy the host (the Windower) applies them itself.
VISIT_KEYS = ("time_limit", "on_timeout")
CONFIG_FILE = "ctxwindow.toml"


def load_config_file(path: str | PathLike[str]) -> dict[str, Any]:
    """Read the ctxwindow table of a TOML file (the whole file, or [tool.ctxwindow])."""
    from pathlib import Path  # here: only a config file needs it, not `import ctxwindow`

    config = _read_config_file(Path(path))
    if config is None:
        raise ConfigError(f"{str(Path(path))!r} has no [tool.ctxwindow] table")
    return config


def _read_config_file(file: Path) -> dict[str, Any] | None:
    """The file's ctxwindow table, its paths made relative to the file's folder; None
    for a pyproject.toml without one."""
    where = f"config file {str(file)!r}"
    if str(file) == "-":  # read_bytes would look for a file named "-"
        raise ConfigError(
            "a config cannot be read from stdin ('-'); give the path of a ctxwindow.toml "
            "or pyproject.toml"
        )
    try:
        raw = file.read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"{where} does not exist") from None
    except IsADirectoryError:
        raise ConfigError(f"{where} is a directory; give the path of the TOML file") from None
    except OSError as error:
        raise ConfigError(f"{where} cannot be read: {error.strerror or error}") from None
    config = parse_config(raw, file)
    return None if config is None else _paths_from(config, file.parent)


def _paths_from(config: dict[str, Any], folder: Path) -> dict[str, Any]:
    """``config`` with the relative path of each ``hf:`` counter joined to ``folder``,
    the config file's: a config means the same wherever the command runs. A counter is
    the ``counter`` key of the config or of a table in it (a plugin's own, such as the
    proxy's ``[models."name"]``): a counter spec is the core's wherever it is written.
    Only the paths the core knows to be paths move; a strategy's options are its own,
    and are passed as written (relative to the current folder)."""
    moved = dict(config)
    counter = moved.get("counter")
    if isinstance(counter, str):
        moved["counter"] = _counter_from(counter, folder)
    for key, value in config.items():
        if isinstance(value, dict):
            moved[key] = _paths_from(value, folder)
    return moved


def _counter_from(counter: str, folder: Path) -> str:
    """``counter``, an ``hf:`` spec's relative path joined to ``folder``."""
    if not counter.startswith("hf:"):
        return counter
    from pathlib import Path  # here: only a config file needs it

    written = counter.removeprefix("hf:")
    given = Path(written).expanduser()
    if not written or given.is_absolute():
        return counter
    return f"hf:{folder / given}"


def parse_config(raw: bytes, file: Path | None = None) -> dict[str, Any] | None:
    """The ctxwindow table of a config file's bytes; ``file``'s name (default
    ctxwindow.toml) says whether it is a pyproject.toml (None when that has no
    [tool.ctxwindow]). Errors are ConfigError."""
    if file is None:
        from pathlib import Path  # here: only a config file needs it

        file = Path(CONFIG_FILE)
    where = f"config file {str(file)!r}"
    try:  # utf-8-sig: a BOM (saved by a Windows editor) is no TOML statement
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise ConfigError(
            f"{where} is not UTF-8 text (byte {error.start}; is it a binary file?); "
            f"TOML files are UTF-8"
        ) from None
    if sys.version_info >= (3, 11):  # imported here: only a config file needs it
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{where} is not valid TOML: {error}; fix it or remove it") from None
    except RecursionError:
        raise ConfigError(f"{where} is not valid TOML: nested too deeply") from None
    if file.name == "pyproject.toml":
        tool = data.get("tool", {})
        table = tool.get("ctxwindow") if isinstance(tool, dict) else None
        if table is None:
            return None
        data = table
    if not isinstance(data, dict):
        raise ConfigError(f"config in {str(file)!r} must be a table")
    return data


def parse_strategy_spec(text: str) -> tuple[str, dict[str, Any]]:
    """A strategy named on a command line: ``name`` or ``name:key=value,key=value``,
    each value read as JSON when it is JSON (``4``, ``true``, ``[1, 2]``) and as a string
    otherwise. Commas inside brackets, braces or quotes belong to the value, so a
    pipeline's ``stages=[...]`` can list several stages. A pair without ``=`` raises
    InvalidOption, and so does a host key (strategy, budget, counter): those are no
    strategy's options, and would quietly override the command's own."""
    import json  # here: only command lines need it, not `import ctxwindow`

    name, _, rest = text.partition(":")
    options: dict[str, Any] = {}
    for pair in _top_level_pairs(rest):
        key, sep, raw = pair.partition("=")
        if not sep or not key.strip():
            raise InvalidOption(
                f"strategy spec {text!r}: {pair!r} is not key=value; write NAME:key=value,key=value"
            )
        if key.strip() in HOST_KEYS:
            raise InvalidOption(_host_key_in_spec(text, key.strip()))
        try:
            options[key.strip()] = json.loads(raw)
        except json.JSONDecodeError:
            options[key.strip()] = raw
    return name.strip(), options


def _host_key_in_spec(text: str, key: str) -> str:
    """Why a spec cannot set ``key``, and what sets it."""
    where = (
        "name the strategy before the ':'"
        if key == "strategy"
        else f"give the {key} with the command's --{key} flag"
    )
    return f"strategy spec {text!r}: {key!r} is not a strategy option; {where}"


def _top_level_pairs(text: str) -> list[str]:
    """``text`` split at the commas outside brackets, braces and double quotes."""
    pairs: list[str] = []
    depth, quoted, escaped, start = 0, False, False, 0
    for index, char in enumerate(text):
        if quoted:
            escaped, quoted = (False, True) if escaped else (char == "\\", char != '"')
        elif char == '"':
            quoted = True
        elif char in "[{":
            depth += 1
        elif char in "]}":
            depth = max(depth - 1, 0)
        elif char == "," and depth == 0:
            pairs.append(text[start:index])
            start = index + 1
    pairs.append(text[start:])
    return [pair for pair in pairs if pair.strip()]


def load_config(path: str | PathLike[str] | None = None) -> dict[str, Any]:
    """The config a command or an app runs with: the ctxwindow table of the TOML file at
    ``path`` (the whole file, or a pyproject.toml's ``[tool.ctxwindow]``); without a
    path, the current directory's ``ctxwindow.toml``, else its pyproject.toml's table,
    else an empty config. Unreadable or invalid files raise ConfigError."""
    if path is not None:
        return load_config_file(path)
    return find_config() or {}


def find_config(directory: str | PathLike[str] = ".") -> dict[str, Any] | None:
    """The config in ``directory``: ctxwindow.toml, else pyproject's [tool.ctxwindow]."""
    found = find_config_file(directory)
    return None if found is None else found[1]


def find_config_file(directory: str | PathLike[str] = ".") -> tuple[Path, dict[str, Any]] | None:
    """The config file in ``directory`` and its table: ctxwindow.toml first, else
    pyproject.toml's [tool.ctxwindow]; None when neither is there."""
    from pathlib import Path  # here: only a config file needs it

    here = Path(directory)
    if (here / CONFIG_FILE).is_file():
        return here / CONFIG_FILE, load_config_file(here / CONFIG_FILE)
    pyproject = here / "pyproject.toml"
    if pyproject.is_file():  # without [tool.ctxwindow] it is no config; broken, an error
        table = _read_config_file(pyproject)
        return None if table is None else (pyproject, table)
    return None


def from_config(
    source: Mapping[str, Any] | str | PathLike[str] | None = None, **overrides: Any
) -> Windower:
    """A ready :class:`Windower` from config; ``overrides`` win over the config's keys.

    ``source`` is a dict, a path to ctxwindow.toml or pyproject.toml, or None to look
    in the current directory.
    """
    if source is None:
        config = find_config() or {}
    elif isinstance(source, Mapping):
        config = dict(source)
    elif isinstance(source, (str, PathLike)):
        config = load_config_file(source)
    else:
        raise ConfigError(
            f"config must be a dict or a path to a TOML file, got {type(source).__name__}"
        )
    config.update(overrides)
    return windower_from(config)


def windower_from(config: Mapping[str, Any], call: str | None = None) -> Windower:
    """A Windower from ``config``; ``call`` names the function whose keyword arguments
    the config was made of (``select``), for errors in the terms of that call."""
    if "strategy" not in config:
        check_keys(config)  # `stratgy = ...` is a typo to name, not a missing key
        raise ConfigError("config has no 'strategy'; name one, for example strategy = \"fixed\"")
    if "budget" not in config:
        check_keys(config)  # `buget = 4000` likewise
        raise ConfigError(
            "config has no 'budget'; give the token budget, for example budget = 4000"
        )
    entry = strategy_entry(config["strategy"])
    budget = check_budget(config["budget"])  # before building a strategy that may load a model
    known = {option.name for option in declared_options(entry.target)}
    options = _strategy_keys(config, known)
    visit = {key: options.pop(key) for key in VISIT_KEYS if key in options and key not in known}
    _check_unknown(options, known, entry, call)
    strategy = build_strategy(entry, options)
    counter = get_counter(config.get("counter"))
    return Windower(strategy, budget, counter, entry.distribution, **visit)


def check_keys(config: Mapping[str, Any]) -> None:
    """Raise InvalidOption for the config's keys that are neither the host's nor options
    of its strategy (with a "did you mean"). Without a strategy that resolves, only keys
    close to a host key are named (the strategy's options are not known)."""
    name = config.get("strategy")
    entry = None
    if isinstance(name, str):
        try:
            entry = strategy_entry(name)
        except CtxWindowError:  # reported where the strategy is needed
            entry = None
    known = set() if entry is None else {option.name for option in declared_options(entry.target)}
    options = _strategy_keys(config, known)
    if entry is not None:
        _check_unknown({k: v for k, v in options.items() if k not in VISIT_KEYS}, known, entry)
        return
    missing = [key for key in HOST_KEYS if key not in config]
    typos = [key for key in options if suggestions([key], missing)]
    if typos:
        raise InvalidOption(
            f"config: unknown key(s) {', '.join(map(repr, typos))}" + suggestions(typos, missing)
        )


def _strategy_keys(config: Mapping[str, Any], known: set[str]) -> dict[str, Any]:
    """The config's keys other than the host's and the tables plugins claim (the
    proxy's ``[serve]`` and ``[models]``: see ``register_config_tables``): the
    strategy's options, an unknown one among them an error to name. A claimed name
    that is also an option of the strategy is the option."""
    claimed = config_tables()
    return {
        key: value
        for key, value in config.items()
        if key not in HOST_KEYS and (key in known or key not in claimed)
    }


def _check_unknown(
    options: Mapping[Any, Any], known: set[str], entry: Registered, call: str | None = None
) -> None:
    unknown = sorted(set(options) - known, key=str)
    if unknown and call is not None:  # keyword arguments: the caller wrote no config
        valid = sorted(set(VISIT_KEYS) | known)
        raise InvalidOption(
            f"{call}(): unknown option(s) {', '.join(map(repr, unknown))} for strategy "
            f"{entry.name!r}; its options: {', '.join(valid)}" + suggestions(unknown, valid)
        )
    if unknown:
        names = sorted(set(HOST_KEYS) | set(VISIT_KEYS) | known)
        raise InvalidOption(
            f"config: unknown key(s) {', '.join(map(repr, unknown))} for strategy "
            f"{entry.name!r}; valid keys: {', '.join(names)}" + suggestions(unknown, names)
        )


class _Windowers:
    """The Windowers the one-call API has built, by configuration, so that calls with
    the same strategy, options and counter share one (and its strategy's per-conversation
    state) rather than build it again. At most WINDOWERS_KEPT, least recently used
    forgotten first. Option values are keys as TOML writes them (scalars, and lists and
    tables of them: a pipeline's ``stages``); a configuration with an object among them
    (a counter or embedder instance) builds its Windower each call."""

    def __init__(self, kept: int) -> None:
        self._lock = threading.Lock()
        self._kept = kept
        self._windowers: OrderedDict[Hashable, Windower] = OrderedDict()

    def get(self, config: dict[str, Any], call: str) -> Windower:
        """The Windower for ``config``, the keyword arguments of ``call``."""
        check_budget(config["budget"])  # first: a bad budget is named before anything else
        key = self._key(config)
        if key is None:
            return windower_from(config, call)
        with self._lock:
            windower = self._windowers.get(key)
            if windower is not None:
                self._windowers.move_to_end(key)
                return windower
        # outside the lock (it may load a model); from a copy, so that a list or table the
        # caller changes after the call cannot change the Windower its old value keys
        windower = windower_from(copy.deepcopy(config), call)
        with self._lock:
            windower = self._windowers.setdefault(key, windower)
            while len(self._windowers) > self._kept:
                self._windowers.popitem(last=False)
        return windower

    @staticmethod
    def _key(config: dict[str, Any]) -> Hashable | None:
        """What identifies a configuration: the registered strategy and the counter
        its name gives now (so a plugin registered again, or gone, is a new key, or an
        error), and the options; None when a value is an object (a counter, an
        embedder), which the cache would keep alive: such calls build their Windower
        each time."""
        entry = strategy_entry(config["strategy"])
        rest = sorted(
            ((key, value) for key, value in config.items() if key not in ("strategy", "budget")),
            key=lambda item: str(item[0]),
        )
        typed = tuple((key, _frozen(value)) for key, value in rest)
        if any(value is None for _, value in typed):
            return None
        counter = get_counter(config.get("counter"))
        return (entry.target, entry.distribution, counter, typed)


def _frozen(value: object) -> Hashable | None:
    """A config value as part of a key: a TOML-like scalar with its type (1, 1.0 and
    True are equal keys, but an option may accept only one of them), a list, tuple or
    table of such values, each item so; None for anything else (an object)."""
    if value is None or isinstance(value, (str, int, float, bool)):
        return (type(value).__name__, value)
    if isinstance(value, (list, tuple)):
        items = tuple(map(_frozen, value))
        return None if None in items else (type(value).__name__, items)
    if isinstance(value, dict) and all(isinstance(key, str) for key in value):
        pairs = tuple(sorted((key, _frozen(item)) for key, item in value.items()))
        return None if any(item is None for _, item in pairs) else ("dict", pairs)
    return None


WINDOWERS_KEPT = 16
_WINDOWERS = _Windowers(WINDOWERS_KEPT)


def cached_windower(
    strategy: str, budget: int, *, counter: TokenCounter | str | None = None, **options: Any
) -> Windower:
    """A Windower for this configuration whose strategy (and its per-conversation
    state) is the one :func:`select` shares across calls with the same strategy, options
    and counter: built on first use, then reused (with an object among them, a new one
    each call). The Windower itself is yours (its budget is ``budget``); for code that
    wraps ``select``, an adapter say."""
    config = {"strategy": strategy, "budget": budget, "counter": counter, **options}
    shared = _WINDOWERS.get(config, "cached_windower")
    windower = copy.copy(shared)
    windower.budget = check_budget(budget)
    return windower


@overload
def select(
    messages: Sequence[Message],
    budget: int,
    strategy: str = "fixed",
    *,
    counter: TokenCounter | str | None = None,
    query: str | None = None,
    **options: Any,
) -> Window[Message]: ...
@overload
def select(
    messages: Sequence[dict[str, Any]],
    budget: int,
    strategy: str = "fixed",
    *,
    counter: TokenCounter | str | None = None,
    query: str | None = None,
    **options: Any,
) -> Window[dict[str, Any]]: ...
@overload
def select(
    messages: Any,
    budget: int,
    strategy: str = "fixed",
    *,
    counter: TokenCounter | str | None = None,
    query: str | None = None,
    **options: Any,
) -> Window[Any]: ...
def select(
    messages: Any,
    budget: int,
    strategy: str = "fixed",
    *,
    counter: TokenCounter | str | None = None,
    query: str | None = None,
    **options: Any,
) -> Window[Any]:
    """Window ``messages`` to ``budget`` tokens with the strategy named ``strategy``.

    Dicts in, the same dict objects out; Messages in, Messages out. Calls with the same
    configuration share one Windower, and a history that grew since an earlier call
    costs its new messages (docs/concepts.md, "The one-call API remembers").
    """
    config = {"strategy": strategy, "budget": budget, "counter": counter, **options}
    window: Window[Any] = _WINDOWERS.get(config, "select").select(
        messages, query=query, budget=budget
    )
    return window


# as Windower.aselect: no overload for dicts, which mypy would erase to Any for a
# list[dict[str, Any]] (an argument holding Any), the most common async call
@overload
async def aselect(
    messages: Sequence[Message],
    budget: int,
    strategy: str = "fixed",
    *,
    counter: TokenCounter | str | None = None,
    query: str | None = None,
    **options: Any,
) -> Window[Message]: ...
@overload
async def aselect(
    messages: Any,
    budget: int,
    strategy: str = "fixed",
    *,
    counter: TokenCounter | str | None = None,
    query: str | None = None,
    **options: Any,
) -> Window[Any]: ...
async def aselect(
    messages: Any,
    budget: int,
    strategy: str = "fixed",
    *,
    counter: TokenCounter | str | None = None,
    query: str | None = None,
    **options: Any,
) -> Window[Any]:
    """Async :func:`select`: does not block the event loop on strategies that wait."""
    config = {"strategy": strategy, "budget": budget, "counter": counter, **options}
    windower = _WINDOWERS.get(config, "aselect")
    window: Window[Any] = await windower.aselect(messages, query=query, budget=budget)
    return window
