"""Every README code block and every example runs (so none goes stale)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted(p for p in (ROOT / "examples").rglob("*.py") if not p.name.startswith("_"))


def _python_blocks() -> list[str]:
    text = (ROOT / "README.md").read_text()
    return re.findall(r"```python\n(.*?)```", text, re.S)


def test_readme_has_python_blocks() -> None:
    assert _python_blocks()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("index", range(len(_python_blocks())))
def test_readme_python_block_runs(index: int) -> None:
    code = _python_blocks()[index]
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=50, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr


def test_readme_commands_name_existing_things() -> None:
    text = (ROOT / "README.md").read_text()
    bash = re.findall(r"```bash\n(.*?)```", text, re.S)
    assert len(bash) >= 2
    for block in bash:
        for path in re.findall(r"(examples/\S+\.py|constraints-dev\.txt)", block):
            assert (ROOT / path).exists(), path


@pytest.mark.timeout(120)
@pytest.mark.parametrize("path", EXAMPLES, ids=[str(p.relative_to(ROOT)) for p in EXAMPLES])
def test_example_runs(path: Path) -> None:
    env = dict(os.environ, FEEDQ_EXAMPLE_QUICK="1")
    proc = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=110, cwd=ROOT, env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
