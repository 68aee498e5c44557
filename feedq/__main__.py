"""``python -m feedq``: the ``feedq`` command."""

from feedq.cli import main

main(prog_name="feedq")
