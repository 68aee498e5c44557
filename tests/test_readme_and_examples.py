"""Every README code block and every example runs (so none goes stale), each
in a process of its own (forked from a warm interpreter: tests/_forkserver.py)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from tests import _forkserver as forkserver

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
    proc = forkserver.run(["-c", code], timeout=50, cwd=ROOT)
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
    proc = forkserver.run([str(path)], timeout=110, cwd=ROOT, env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
