"""Running the ``ctxwindow`` command in a test: the core's commands and those a plugin
adds through ``register_commands``, in this process, as a user would type them."""

from __future__ import annotations

import io
import sys
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass

from ctxwindow._cli import main


@dataclass(frozen=True)
class CommandResult:
    """How a command ended: its exit code and what it wrote."""

    code: int
    out: str
    err: str

    def error(self) -> str:
        """The one error line a failed command prints, checked: a non-zero exit, one
        ``ctxwindow: error:`` line on stderr, no traceback."""
        assert self.code != 0, f"the command succeeded: {self.out!r}"
        lines = self.err.splitlines()
        assert len(lines) == 1, f"want one line, got: {self.err!r}"
        assert lines[0].startswith("ctxwindow: error: "), lines[0]
        assert "Traceback" not in self.err and "internal error" not in self.err, self.err
        return lines[0]


def run_command(*args: str, stdin: bytes | None = None) -> CommandResult:
    """``ctxwindow ARGS`` in this process (``stdin``: what it reads for ``-``); argparse's
    own exits (usage errors, ``--help``) are results too."""
    out, err = io.StringIO(), io.StringIO()
    old = sys.stdin
    if stdin is not None:
        sys.stdin = io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8")
    try:
        with redirect_stdout(out), redirect_stderr(err):
            try:
                code = main(list(args))
            except SystemExit as exit_:
                code = int(exit_.code or 0)
    finally:
        sys.stdin = old
    return CommandResult(code, out.getvalue(), err.getvalue())
