"""``python -m feedq.cli``."""

from feedq.cli.main import main

main()
