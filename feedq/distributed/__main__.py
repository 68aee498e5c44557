"""``python -m feedq.distributed``: the ``feedq cluster`` command under its
own program name.

The command lives with the others in the CLI package
(``feedq/cli/_cluster.py``), the layer above this one. This file is a
program, not a module that anything imports, so it looks the command up
when it runs rather than importing it: the distributed package's imports
keep pointing down the layers (the contract in ``pyproject.toml``).
"""

import sys
from importlib import import_module

sys.exit(import_module("feedq.cli._cluster").main())
