"""feedq._native picks its core: the C extension when it is built, the Python
twin otherwise or with FEEDQ_PURE_PYTHON=1; the readers use whichever it
picked."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import feedq._native as nat

ROOT = Path(__file__).resolve().parents[2]
NOT_BUILT = (
    f"feedq._native._core is not built ({nat.NATIVE_IMPORT_ERROR}); "
    "build it with: python setup.py build_ext --inplace"
)


def core_in_subprocess(**env: str) -> str:
    full = {k: v for k, v in os.environ.items() if k != "FEEDQ_PURE_PYTHON"}
    full.update(env)
    full["PYTHONPATH"] = str(ROOT) + os.pathsep + full.get("PYTHONPATH", "")
    code = (
        "import feedq._native as n, feedq.readers._tfrecord as t;"
        "assert t._native.scan_tfrecords is n.scan_tfrecords;"
        "print(n.CORE, n.scan_tfrecords.__self__.name)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=full, capture_output=True, text=True, timeout=60, check=True
    )
    return out.stdout.strip()


def test_the_environment_variable_forces_the_twin() -> None:
    assert core_in_subprocess(FEEDQ_PURE_PYTHON="1") == "python python"


@pytest.mark.skipif(nat.NATIVE is None, reason=NOT_BUILT)
def test_the_native_core_is_the_default_when_built() -> None:
    assert core_in_subprocess() == "native native"
    assert core_in_subprocess(FEEDQ_PURE_PYTHON="0") == "native native"


def test_core_names_the_kernels_in_use() -> None:
    assert nat.CORE in ("native", "python")
    active = nat.NATIVE if nat.CORE == "native" else nat.PURE
    assert active is not None
    assert nat.scan_tfrecords.__self__ is active  # type: ignore[attr-defined]
    assert nat.parse_examples.__self__ is active  # type: ignore[attr-defined]
    if nat.NATIVE is None:
        assert nat.CORE == "python" and nat.NATIVE_IMPORT_ERROR


def test_the_twin_imports_nothing_from_feedq() -> None:
    for name in ("_pure", "_api"):
        src = (ROOT / "feedq" / "_native" / f"{name}.py").read_text()
        assert not re.search(r"^\s*(from|import) feedq\b", src, re.MULTILINE), name


def test_version_names_the_active_core() -> None:
    for env_value, want in (("1", "python"), ("0", None)):
        env = dict(os.environ, FEEDQ_PURE_PYTHON=env_value)
        out = subprocess.run([sys.executable, "-m", "feedq", "--version"], env=env,
                             capture_output=True, text=True, timeout=60, check=True).stdout
        # "0" is the default: the native core when it is built (whatever
        # FEEDQ_PURE_PYTHON says in the environment running this test).
        expected = want or ("native" if nat.NATIVE is not None else "python")
        assert out.strip().endswith(f"(core: {expected})"), out
