"""The ``feedq`` command."""

from feedq.cli.main import main

__all__ = ["main"]
