"""The two cores every native-core test runs on: the pure-Python twin, and
the compiled core when it is built (skipped, saying how to build it, if not)."""

from __future__ import annotations

import pytest

import feedq._native as nat

NOT_BUILT = (
    f"feedq._native._core is not built ({nat.NATIVE_IMPORT_ERROR}); "
    "build it with: python setup.py build_ext --inplace"
)
CORES = [
    pytest.param(nat.PURE, id="python"),
    pytest.param(nat.NATIVE, id="native", marks=pytest.mark.skipif(nat.NATIVE is None, reason=NOT_BUILT)),
]
