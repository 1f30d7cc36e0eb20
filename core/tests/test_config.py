"""from_config: dicts, ctxwindow.toml, [tool.ctxwindow], and the same checks as in Python."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import pytest

import ctxwindow
from ctxwindow import (
    ConfigError,
    CtxWindowError,
    History,
    InvalidBudget,
    InvalidOption,
    Option,
    PluginError,
    Selection,
    UnknownStrategy,
    Windower,
)
from ctxwindow._config import find_config
from ctxwindow.testing.strategies import Newest, newest


class Capped(Newest):
    """The newest units that fit, at most ``max_messages`` messages of them."""

    name = "capped"
    option_specs = (
        Option("max_messages", int, None, "At most this many messages.", minimum=0, nullable=True),
    )

    def choose(self, history: History) -> Selection:
        return newest(history)


@pytest.fixture(autouse=True)
def _capped(ctxwindow_register: Any) -> None:
    ctxwindow_register(Capped, name="capped", distribution="ctxwindow-capped")


MESSAGES = [
    {"role": "system", "content": "s" * 8},
    {"role": "user", "content": "a" * 40},
    {"role": "assistant", "content": "b" * 40},
    {"role": "user", "content": "c" * 40},
]


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


# -- sources ---------------------------------------------------------------------------
def test_from_dict() -> None:
    windower = ctxwindow.from_config({"strategy": "capped", "budget": 4000, "max_messages": 6})
    assert isinstance(windower, Windower)
    assert isinstance(windower.strategy, Capped)
    assert windower.budget == 4000
    assert windower.counter.name == "approx"
    assert windower.distribution == "ctxwindow-capped"
    defaults = {option.name: option.default for option in Capped.all_options()}
    assert {"oversize", "orphans", "max_messages"} <= set(defaults)
    assert dict(windower.strategy.options) == {**defaults, "max_messages": 6}
    assert repr(windower) == "Windower(Capped(max_messages=6), budget=4000, counter='approx')"


def test_from_dict_is_not_modified() -> None:
    config = {"strategy": "capped", "budget": 100}
    ctxwindow.from_config(config, budget=50, oversize="truncate")
    assert config == {"strategy": "capped", "budget": 100}


def test_overrides_win() -> None:
    windower = ctxwindow.from_config(
        {"strategy": "capped", "budget": 100}, budget=50, oversize="truncate"
    )
    assert windower.budget == 50
    assert windower.strategy.options["oversize"] == "truncate"


def test_ctxwindow_toml(tmp_path: Path) -> None:
    path = write(
        tmp_path / "ctxwindow.toml",
        'strategy = "capped"\nbudget = 2000\ncounter = "approx:2"\n'
        'max_messages = 3\norphans = "drop"\n',
    )
    for source in (path, str(path)):
        windower = ctxwindow.from_config(source)
        assert isinstance(windower.strategy, Capped)
        assert windower.budget == 2000
        assert windower.counter is ctxwindow.get_counter("approx:2")
        assert windower.strategy.options["max_messages"] == 3
        assert windower.strategy.options["orphans"] == "drop"


def test_any_toml_file_name_is_a_whole_file_table(tmp_path: Path) -> None:
    path = write(tmp_path / "settings.toml", 'strategy = "capped"\nbudget = 10\n')
    assert ctxwindow.from_config(path).budget == 10


def test_pyproject_tool_table(tmp_path: Path) -> None:
    path = write(
        tmp_path / "pyproject.toml",
        '[project]\nname = "app"\n\n'
        '[tool.ctxwindow]\nstrategy = "capped"\nbudget = 3000\noversize = "truncate"\n',
    )
    windower = ctxwindow.from_config(path)
    assert windower.budget == 3000
    assert windower.strategy.options["oversize"] == "truncate"


def test_pyproject_without_the_table(tmp_path: Path) -> None:
    path = write(tmp_path / "pyproject.toml", '[project]\nname = "app"\n\n[tool.other]\nx = 1\n')
    with pytest.raises(ConfigError, match=r"has no \[tool.ctxwindow\] table"):
        ctxwindow.from_config(path)
    empty = write(tmp_path / "sub.toml", "")
    with pytest.raises(ConfigError, match="config has no 'strategy'"):
        ctxwindow.from_config(empty)


def test_invalid_toml(tmp_path: Path) -> None:
    path = write(tmp_path / "ctxwindow.toml", 'strategy = "fixed\nbudget = = 4\n')
    with pytest.raises(ConfigError, match="is not valid TOML") as raised:
        ctxwindow.from_config(path)
    assert str(path) in str(raised.value)
    assert isinstance(raised.value, ValueError)


def test_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "ctxwindow.toml"
    path.write_bytes(b'strategy = "\xff\xfe"\n')
    with pytest.raises(ConfigError, match="is not UTF-8 text"):
        ctxwindow.from_config(path)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        ctxwindow.from_config(tmp_path / "nope.toml")


def test_source_of_wrong_type() -> None:
    with pytest.raises(
        ConfigError, match="config must be a dict or a path to a TOML file, got int"
    ):
        ctxwindow.from_config(42)  # type: ignore[arg-type]


def test_missing_strategy_or_budget() -> None:
    with pytest.raises(ConfigError, match="config has no 'strategy'"):
        ctxwindow.from_config({"budget": 100})
    with pytest.raises(ConfigError, match="config has no 'budget'"):
        ctxwindow.from_config({"strategy": "capped"})


def test_none_looks_in_the_current_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match="config has no 'strategy'"):
        ctxwindow.from_config()
    write(tmp_path / "pyproject.toml", '[tool.ctxwindow]\nstrategy = "capped"\nbudget = 111\n')
    assert ctxwindow.from_config().budget == 111
    # ctxwindow.toml wins over pyproject.toml
    write(tmp_path / "ctxwindow.toml", 'strategy = "capped"\nbudget = 222\n')
    assert ctxwindow.from_config().budget == 222
    assert ctxwindow.from_config(None, budget=5).budget == 5


def test_pyproject_without_table_in_current_directory_is_no_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "pyproject.toml", '[project]\nname = "app"\n')
    assert ctxwindow.from_config(strategy="capped", budget=9).budget == 9


def test_broken_pyproject_in_current_directory_is_an_error_not_no_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "pyproject.toml", "[tool.ctxwindow]\nstrategy = fixed\n")  # unquoted
    with pytest.raises(ConfigError, match="is not valid TOML"):
        ctxwindow.from_config(strategy="capped", budget=9)
    with pytest.raises(ConfigError, match="is not valid TOML"):
        find_config(tmp_path)
    write(tmp_path / "pyproject.toml", '[project]\nname = "app"\ntool = 3\n')
    assert find_config(tmp_path) is None


def test_windower_selects() -> None:
    windower = ctxwindow.from_config({"strategy": "capped", "budget": 35})
    window = windower.select(MESSAGES)
    assert [m["content"][0] for m in window.messages] == ["s", "b", "c"]
    assert windower.select(MESSAGES, budget=10_000).record.engaged is False
    with pytest.raises(InvalidBudget):
        windower.select(MESSAGES, budget=0)


# -- unknown keys, wrong types ---------------------------------------------------------
def test_unknown_key_lists_the_valid_keys() -> None:
    with pytest.raises(InvalidOption) as raised:
        ctxwindow.from_config(
            {"strategy": "capped", "budget": 100, "max_mesages": 3, "colour": "red"}
        )
    text = str(raised.value)
    assert "unknown key(s) 'colour', 'max_mesages' for strategy 'capped'" in text
    keys = sorted(["budget", "counter", "strategy", *(o.name for o in Capped.all_options())])
    assert f"valid keys: {', '.join(keys)}" in text
    assert {"max_messages", "orphans", "oversize"} <= set(keys)
    assert isinstance(raised.value, ValueError)


def test_unknown_key_from_a_file(tmp_path: Path) -> None:
    path = write(tmp_path / "ctxwindow.toml", 'strategy = "capped"\nbudget = 100\nwindow = 3\n')
    with pytest.raises(
        InvalidOption, match=r"unknown key.*'window'.*valid keys: budget, counter, max_messages"
    ):
        ctxwindow.from_config(path)


def test_tables_a_plugin_claims_are_left_to_it_and_others_are_errors(tmp_path: Path) -> None:
    """Found by a docs reader: the proxy's documented ctxwindow.toml ([serve], [models.*]
    beside the strategy keys) made `ctxwindow select` and from_config raise "unknown
    key(s) 'models'". A plugin claims its tables (register_config_tables, as the proxy
    does); any other unknown key, a table too, is still named."""

    class Dashboard:
        @ctxwindow.hookimpl
        def register_config_tables(self, register: Any) -> None:
            register("dashboard", "a dashboard")
            register("hosts", "its hosts")

    text = (
        'strategy = "capped"\nbudget = 100\nmax_messages = 2\n'
        '[dashboard]\nport = 8080\n[hosts."a"]\nurl = "http://a"\n'
    )
    path = write(tmp_path / "ctxwindow.toml", text)
    with pytest.raises(InvalidOption, match=r"unknown key\(s\) 'dashboard', 'hosts'"):
        ctxwindow.from_config(path)
    ctxwindow.register_plugin(Dashboard(), "dashboard-tables", "ctxwindow-dashboard")
    try:
        assert ctxwindow.from_config(path).strategy.options["max_messages"] == 2
        with pytest.raises(InvalidOption, match=r"unknown key\(s\) 'max_mesages', 'sevre'"):
            ctxwindow.from_config(
                {"strategy": "capped", "budget": 100, "max_mesages": 2, "sevre": {"port": 1}}
            )
    finally:
        ctxwindow.unregister_plugin("dashboard-tables")


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("max_messages", "x", "option 'max_messages' expects int | None, got str 'x'"),
        ("max_messages", 2.5, "option 'max_messages' expects int | None, got float 2.5"),
        ("max_messages", True, "option 'max_messages' expects int | None, got bool True"),
        ("max_messages", -1, "option 'max_messages' must be >= 0, got -1"),
        ("oversize", 1, "option 'oversize' expects str, got int 1"),
        (
            "oversize",
            "chop",
            "option 'oversize' must be one of 'cut', 'truncate', 'raise', got 'chop'",
        ),
        ("orphans", "ignore", "option 'orphans' must be one of 'raise', 'drop', got 'ignore'"),
    ],
)
def test_wrong_option_value_names_the_expectation(key: str, value: Any, message: str) -> None:
    with pytest.raises(InvalidOption) as from_config:
        ctxwindow.from_config({"strategy": "capped", "budget": 100, key: value})
    assert message in str(from_config.value)
    assert str(from_config.value).startswith("strategy 'capped': ")
    # the same check when the class is built in Python
    with pytest.raises(InvalidOption) as direct:
        Capped(**{key: value})
    assert str(direct.value) == str(from_config.value)
    with pytest.raises(InvalidOption) as by_name:
        ctxwindow.get_strategy("capped", **{key: value})
    assert str(by_name.value) == str(from_config.value)
    with pytest.raises(InvalidOption) as through_select:
        ctxwindow.select(MESSAGES, 100, "capped", **{key: value})
    assert str(through_select.value) == str(from_config.value)


def test_direct_construction_checks_like_config() -> None:
    with pytest.raises(
        InvalidOption, match=re.escape("option 'max_messages' expects int | None, got str 'x'")
    ):
        Capped(max_messages="x")
    with pytest.raises(
        InvalidOption,
        match=re.escape(
            "unknown option(s) 'bogus'; valid options: "
            + ", ".join(sorted(o.name for o in Capped.all_options()))
        ),
    ):
        Capped(bogus=1)
    assert Capped(max_messages=None).options["max_messages"] is None
    assert Capped(max_messages=0).options["max_messages"] == 0
    assert repr(Capped()) == "Capped()"
    assert repr(Capped(oversize="truncate")) == "Capped(oversize='truncate')"


def test_options_are_read_only() -> None:
    strategy = Capped(max_messages=2)
    with pytest.raises(TypeError):
        strategy.options["max_messages"] = 5  # type: ignore[index]


def test_bad_counter_in_config() -> None:
    with pytest.raises(ctxwindow.UnknownCounter):
        ctxwindow.from_config({"strategy": "capped", "budget": 100, "counter": "nope"})
    with pytest.raises(InvalidOption):
        ctxwindow.from_config({"strategy": "capped", "budget": 100, "counter": 5})


# -- strategies ------------------------------------------------------------------------
def test_unknown_first_party_strategy_gives_the_install_hint(
    uninstalled_first_party: str, install_advice: str
) -> None:
    name = uninstalled_first_party
    hint = f"pip install ctxwindow-{name}"
    with pytest.raises(UnknownStrategy) as raised:
        ctxwindow.from_config({"strategy": name, "budget": 100})
    error = raised.value
    assert error.name == name
    assert error.install_hint == hint
    assert error.installed and name not in error.installed
    advice = install_advice
    assert advice in str(error)
    assert "installed strategies: " in str(error)
    assert isinstance(error, LookupError)
    with pytest.raises(UnknownStrategy, match=re.escape(advice)):
        ctxwindow.select(MESSAGES, 100, strategy=name)
    with pytest.raises(UnknownStrategy, match=re.escape(advice)):
        ctxwindow.get_strategy(name)


def test_unknown_other_strategy_has_no_hint() -> None:
    with pytest.raises(UnknownStrategy) as raised:
        ctxwindow.from_config({"strategy": "magic", "budget": 100})
    assert raised.value.install_hint is None
    assert "pip install" not in str(raised.value)
    assert str(raised.value).startswith("unknown strategy 'magic'; installed strategies: ")


def test_strategy_name_of_wrong_type() -> None:
    with pytest.raises(InvalidOption, match="strategy must be a name"):
        ctxwindow.from_config({"strategy": Capped, "budget": 100})


def test_get_strategy() -> None:
    strategy = ctxwindow.get_strategy("capped", max_messages=4)
    assert isinstance(strategy, Capped)
    assert strategy.options["max_messages"] == 4


# -- budgets ---------------------------------------------------------------------------
BAD_BUDGETS = [0, -1, 1.5, True, False, "100", None, 100.5, float("nan")]


@pytest.mark.parametrize("budget", BAD_BUDGETS)
def test_bad_budget_in_config(budget: Any) -> None:
    with pytest.raises(InvalidBudget) as raised:
        ctxwindow.from_config({"strategy": "capped", "budget": budget})
    assert isinstance(raised.value, ValueError)
    assert isinstance(raised.value, CtxWindowError)
    assert "budget must be a positive int (tokens)" in str(raised.value)


@pytest.mark.parametrize("budget", BAD_BUDGETS)
def test_bad_budget_everywhere(budget: Any) -> None:
    with pytest.raises(InvalidBudget):
        ctxwindow.select(MESSAGES, budget, "capped")
    with pytest.raises(InvalidBudget):
        Capped().select(MESSAGES, budget)
    with pytest.raises(InvalidBudget):
        Windower(Capped(), budget, ctxwindow.get_counter())


def test_budget_from_toml_string(tmp_path: Path) -> None:
    path = write(tmp_path / "ctxwindow.toml", 'strategy = "capped"\nbudget = "100"\n')
    with pytest.raises(InvalidBudget, match="got str '100'"):
        ctxwindow.from_config(path)
    floats = write(tmp_path / "f.toml", 'strategy = "capped"\nbudget = 1.5\n')
    with pytest.raises(InvalidBudget, match=re.escape("got float 1.5")):
        ctxwindow.from_config(floats)


def test_budget_messages() -> None:
    with pytest.raises(InvalidBudget, match=r"got 0$"):
        ctxwindow.from_config({"strategy": "capped", "budget": 0})
    with pytest.raises(InvalidBudget, match="got bool True"):
        ctxwindow.from_config({"strategy": "capped", "budget": True})
    assert ctxwindow.from_config({"strategy": "capped", "budget": 1}).budget == 1


def test_load_config_reads_a_path_or_finds_the_directorys_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert ctxwindow.load_config() == {}  # nothing here: an empty config, not an error
    (tmp_path / "pyproject.toml").write_text('[tool.ctxwindow]\nstrategy = "newest"\n')
    assert ctxwindow.load_config() == {"strategy": "newest"}
    (tmp_path / "ctxwindow.toml").write_text("budget = 300\n")
    assert ctxwindow.load_config() == {"budget": 300}  # ctxwindow.toml first
    other = tmp_path / "other.toml"
    other.write_text("budget = 7\n[serve]\nport = 1\n")
    assert ctxwindow.load_config(other) == {"budget": 7, "serve": {"port": 1}}
    with pytest.raises(ConfigError, match="does not exist"):
        ctxwindow.load_config(tmp_path / "missing.toml")


CLEAR = {"strategy": "clear_tool_outputs", "keep_recent": 2}
TORCH = "sentence-transformers:@torch"


@pytest.mark.parametrize(
    ("text", "name", "options"),
    [
        ("fixed", "fixed", {}),
        ("fixed:", "fixed", {}),
        (" sliding : n=40 , note=two words", "sliding", {"n": 40, "note": "two words"}),
        (f"semantic:embedder={TORCH}", "semantic", {"embedder": TORCH}),
        (
            f'pipeline:stages=[{json.dumps(CLEAR)}, "sliding"],when=always',
            "pipeline",
            {"stages": [CLEAR, "sliding"], "when": "always"},
        ),
        ('x:label="a, \\"b\\", c",n=1', "x", {"label": 'a, "b", c', "n": 1}),
    ],
)
def test_a_strategy_spec_keeps_commas_inside_brackets_and_quotes(
    text: str, name: str, options: dict[str, Any]
) -> None:
    assert ctxwindow.parse_strategy_spec(text) == (name, options)


def test_a_strategy_spec_pair_without_a_value_names_itself() -> None:
    with pytest.raises(InvalidOption, match=r"'oops' is not key=value"):
        ctxwindow.parse_strategy_spec("fixed:max_messages=3,oops")


@pytest.mark.parametrize(
    ("value", "message"),
    [(math.nan, "must be a finite number"), (math.inf, "must be a finite number"),
     (-math.inf, "must be >= 0.0")],
)  # fmt: skip
def test_a_weight_that_is_not_a_finite_number_is_refused(value: float, message: str) -> None:
    """NaN passed every range check (each comparison is False) and made rankings
    garbage; an infinite weight swamps every other term."""
    weight = Option("weight", float, 1.0, "a weight", minimum=0.0)
    with pytest.raises(InvalidOption, match=f"option 'weight' {message}, got"):
        weight.validate("strategy 'x'", value)
    assert weight.validate("strategy 'x'", 2) == 2.0


class _Picky(Capped):
    """Rejects a value its own way, as plugins do: a bare ValueError."""

    name = "picky"

    def __init__(self, **options: Any) -> None:
        if options.get("max_messages") == 13:
            raise ValueError("13 is unlucky")
        if options.get("max_messages") == 14:
            raise OSError("the model file is gone")
        super().__init__(**options)


def test_a_strategys_own_errors_while_building_are_ctxwindow_errors(
    ctxwindow_register: Any,
) -> None:
    """A plugin's bare ValueError from its constructor left ctxwindow unwrapped (the CLI
    printed "error: 13 is unlucky", naming neither strategy nor distribution)."""
    ctxwindow_register(_Picky, name="picky", distribution="ctxwindow-picky")
    for build in (
        lambda options: ctxwindow.from_config({"strategy": "picky", "budget": 100, **options}),
        lambda options: ctxwindow.get_strategy("picky", **options),
    ):
        with pytest.raises(InvalidOption, match="strategy 'picky' rejected its options: 13 is"):
            build({"max_messages": 13})
        with pytest.raises(PluginError, match="'picky' from distribution 'ctxwindow-picky' fai"):
            build({"max_messages": 14})


def test_the_one_call_api_forgets_a_counter_whose_plugin_went() -> None:
    """Found by a docs reader: after unregister_plugin, ctxwindow.select still counted
    with the plugin's counter under a name it had used before (its Windower was cached
    by the counter's name), while get_counter and a new name raised UnknownCounter."""

    class Words:
        @ctxwindow.hookimpl
        def register_token_counters(self, register: Any) -> None:
            register("words", lambda argument: ctxwindow.ApproxCounter(chars_per_token=5.0))

    ctxwindow.register_plugin(Words(), "words", "ctxwindow-words")
    try:
        window = ctxwindow.select(MESSAGES, budget=1_000, strategy="capped", counter="words")
        assert window.record.counter == "approx:5"
    finally:
        ctxwindow.unregister_plugin("words")
    with pytest.raises(ctxwindow.UnknownCounter, match="unknown token counter 'words'"):
        ctxwindow.select(MESSAGES, budget=1_000, strategy="capped", counter="words")


class Staged(Newest):
    """Counts its instances; takes a list of names or tables, as a pipeline's stages."""

    name = "staged"
    built = 0
    option_specs = (Option("stages", (list, tuple), [], "Names or tables."),)

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        type(self).built += 1

    def choose(self, history: History) -> Selection:
        return newest(history)


def test_the_one_call_api_remembers_a_configuration_with_lists_and_tables(
    ctxwindow_register: Any,
) -> None:
    """An option holding a list of names and tables (a pipeline's ``stages``, as every
    sample writes it) made the configuration no key: each call built the strategy
    again, its per-conversation state lost, a summarizer called on every turn. Lists
    and tables of TOML values are keys now; what differs in them, types included, is
    another key, and a list the caller changes afterwards is not the one remembered."""
    ctxwindow_register(Staged, name="staged", distribution="ctxwindow-staged")
    Staged.built = 0
    stages: list[Any] = ["a", {"strategy": "b", "budget_share": 0.5}]
    for _ in range(3):
        ctxwindow.select(MESSAGES, 100, "staged", stages=stages)
    assert Staged.built == 1
    ctxwindow.select(MESSAGES, 100, "staged", stages=["a", {"budget_share": 0.5, "strategy": "b"}])
    assert Staged.built == 1  # a table's keys in another order: the same table
    stages[1]["budget_share"] = 1  # an int where a float was: another configuration
    ctxwindow.select(MESSAGES, 100, "staged", stages=stages)
    assert Staged.built == 2
    windower = ctxwindow.cached_windower("staged", 100, stages=stages)
    stages.append("c")  # changed after the call: the remembered one is not
    assert windower.strategy.options["stages"] == ["a", {"strategy": "b", "budget_share": 1}]
    ctxwindow.select(MESSAGES, 100, "staged", stages=("a", {"strategy": "b", "budget_share": 1}))
    assert Staged.built == 3  # a tuple where a list was: another key, as 1 and 1.0 are
    ctxwindow.select(MESSAGES, 100, "staged", stages=[object()])
    ctxwindow.select(MESSAGES, 100, "staged", stages=[object()])
    assert Staged.built == 5  # an object among them: built each call, as before


@pytest.mark.parametrize("key", ["strategy", "budget", "counter"])
def test_a_strategy_spec_cannot_set_a_host_key(key: str) -> None:
    """They are no strategy's options, and from a spec they would quietly win over the
    command's own --strategy, --budget and --counter (inspect's page heading, say)."""
    with pytest.raises(InvalidOption, match=rf"{key!r} is not a strategy option"):
        ctxwindow.parse_strategy_spec(f"fixed:max_messages=3,{key}=x")


# -- relative paths in a config file -------------------------------------------------------
@pytest.mark.parametrize(
    ("written", "read"),
    [
        ("hf:tokenizer.json", "hf:{folder}/tokenizer.json"),
        ("hf:models/tok", "hf:{folder}/models/tok"),
        ("hf:.", "hf:{folder}"),
        ("hf:/abs/tokenizer.json", "hf:/abs/tokenizer.json"),
        ("hf:~/tokenizer.json", "hf:~/tokenizer.json"),
        ("hf:", "hf:"),
        ("approx", "approx"),
        ("tiktoken:cl100k_base", "tiktoken:cl100k_base"),
    ],
)
def test_an_hf_counter_path_in_a_config_file_is_from_the_files_folder(
    tmp_path: Path, written: str, read: str
) -> None:
    """A config means the same wherever the command runs; other counters are no paths."""
    folder = tmp_path / "proj"
    folder.mkdir()
    for name, text in (
        ("ctxwindow.toml", f'budget = 300\ncounter = "{written}"\n'),
        ("pyproject.toml", f'[tool.ctxwindow]\nbudget = 300\ncounter = "{written}"\n'),
    ):
        (folder / name).write_text(text, encoding="utf-8")
        config = ctxwindow.load_config(folder / name)
        expected = read.format(folder=folder)
        if written.startswith("hf:~"):
            expected = written  # the counter expands ~ itself: read as written
        assert config["counter"] == expected


def test_an_hf_counter_path_in_a_plugins_table_is_from_the_files_folder(tmp_path: Path) -> None:
    """A counter spec is the core's wherever it is written: the proxy's per-model
    counters (``[models."name"] counter``) move as the config's own does; nothing else
    in the table does."""
    folder = tmp_path / "proj"
    folder.mkdir()
    (folder / "ctxwindow.toml").write_text(
        'counter = "approx"\n'
        '[models."local-llama"]\ncontext = 8192\ncounter = "hf:llama/tokenizer.json"\n'
        '[models."gpt-4o"]\ncontext = 128000\ncounter = "tiktoken:o200k_base"\n'
        '[serve]\nupstream = "http://localhost:8000"\nlog = "logs/serve.jsonl"\n',
        encoding="utf-8",
    )
    config = ctxwindow.load_config(folder / "ctxwindow.toml")
    assert config["counter"] == "approx"
    assert config["models"]["local-llama"] == {
        "context": 8192,
        "counter": f"hf:{folder / 'llama' / 'tokenizer.json'}",
    }
    assert config["models"]["gpt-4o"]["counter"] == "tiktoken:o200k_base"
    assert config["serve"] == {"upstream": "http://localhost:8000", "log": "logs/serve.jsonl"}


def test_a_config_in_the_current_folder_keeps_its_relative_hf_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "ctxwindow.toml").write_text('budget = 3\ncounter = "hf:tok.json"\n')
    monkeypatch.chdir(tmp_path)
    assert find_config() == {"budget": 3, "counter": "hf:tok.json"}
