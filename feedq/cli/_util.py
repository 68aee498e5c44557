"""The error contract of every ``feedq`` command (``feedq ...`` and
``python -m feedq.distributed``): an error prints as one line,
``feedq: error: <Type>: <message>``, with exit status 1, or as a traceback
with ``--debug``; Ctrl-C prints ``feedq: interrupted`` and exits with 130;
a closed stdout (``feedq inspect f | head``) ends the command quietly with 141.
Bad command-line arguments stay click's usage errors (exit status 2).

Commands that read data end their process with ``os._exit`` once their
output is flushed: pyarrow's thread pool, used from reader threads, can abort
the interpreter's teardown after all the work is done ("terminate called
without an active exception", exit status 134; apache/arrow#34314). Only a
process that ``feedq`` runs as a program does so (:class:`ProgramGroup`);
commands invoked in-process (tests, ``CliRunner``) exit normally.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any, NoReturn

import click

__all__ = ["CONTEXT", "ProgramGroup", "fail", "guard", "set_debug"]

#: Click context settings shared by every command.
CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}

_debug = False
_program = False  # this process runs the feedq command as its program


class ProgramGroup(click.Group):
    """A click group that knows when it is the process's program: invoked
    with the arguments of the command line (``args=None``), standalone."""

    def main(self, *args: Any, **kwargs: Any) -> Any:
        global _program
        cli_args = args[0] if args else kwargs.get("args")
        if cli_args is None and kwargs.get("standalone_mode", True):
            _program = True
        return super().main(*args, **kwargs)


def set_debug(debug: bool) -> None:
    """Show tracebacks instead of one-line errors (``--debug``)."""
    global _debug
    _debug = _debug or debug


def fail(message: str, code: int = 1) -> NoReturn:
    """Print ``feedq: error: message`` and exit."""
    click.echo(f"feedq: error: {message}", err=True)
    sys.exit(code)


def guard(fn: Callable[[], int | None], *, reads_data: bool = False) -> NoReturn:
    """Run a command body under the error contract; exit with its status.

    ``reads_data``: the body may have used pyarrow from reader threads; as the
    process's program, end it with ``os._exit`` (see the module docstring).
    """
    try:
        try:
            code = fn()
        except KeyboardInterrupt:
            click.echo("\nfeedq: interrupted", err=True)
            code = 130
        except BrokenPipeError:
            # The reader of stdout went away (`feedq inspect f | head`): nothing
            # more can be shown and that is no error of the data; end quietly
            # with a shell's status for SIGPIPE.
            _silence_stdout()
            code = 141
        except (click.exceptions.Exit, click.ClickException, click.exceptions.Abort):
            raise
        except Exception as exc:
            if _debug:
                raise
            text = str(exc) or type(exc).__name__
            fail(f"{type(exc).__name__}: {text}".splitlines()[0])
    except SystemExit as exc:  # fail(), or sys.exit in the body
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        _silence_stdout()
        code = code or 141
    if reads_data and _program:
        sys.stderr.flush()
        os._exit(code or 0)
    sys.exit(code or 0)


def _silence_stdout() -> None:
    """Point stdout at /dev/null so that later flushes (ours, the
    interpreter's at exit) do not fail again on a closed pipe."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # no real file descriptor (CliRunner)
        pass
