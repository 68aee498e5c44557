"""The error contract of every ``feedq`` command (``feedq ...`` and
``python -m feedq.distributed``): an error prints as one line,
``feedq: error: <Type>: <message>``, with exit status 1, or as a traceback
with ``--debug``; Ctrl-C prints ``feedq: interrupted`` and exits with 130.
Bad command-line arguments stay click's usage errors (exit status 2).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import NoReturn

import click

__all__ = ["CONTEXT", "fail", "guard", "set_debug"]

#: Click context settings shared by every command.
CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}

_debug = False


def set_debug(debug: bool) -> None:
    """Show tracebacks instead of one-line errors (``--debug``)."""
    global _debug
    _debug = _debug or debug


def fail(message: str, code: int = 1) -> NoReturn:
    """Print ``feedq: error: message`` and exit."""
    click.echo(f"feedq: error: {message}", err=True)
    sys.exit(code)


def guard(fn: Callable[[], int | None]) -> NoReturn:
    """Run a command body under the error contract; exit with its status."""
    try:
        code = fn()
    except KeyboardInterrupt:
        click.echo("\nfeedq: interrupted", err=True)
        sys.exit(130)
    except (click.exceptions.Exit, click.ClickException, click.exceptions.Abort):
        raise
    except Exception as exc:
        if _debug:
            raise
        text = str(exc) or type(exc).__name__
        fail(f"{type(exc).__name__}: {text}".splitlines()[0])
    sys.exit(code or 0)
