"""``python -m feedq.distributed``: the ``feedq cluster`` command under its
own program name.

The command lives with the others in the CLI package
(``feedq/cli/_cluster.py``), the layer above this one. This file is a
program entry point, not a module that anything imports; the import-linter
contracts in ``pyproject.toml`` list this one upward import by name.
"""

import sys

from feedq.cli._cluster import main

sys.exit(main())
