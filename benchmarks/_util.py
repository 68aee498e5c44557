"""Shared helpers for the benchmark scripts: timing, medians, tables."""

from __future__ import annotations

import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence


def median_rate(fn: Callable[[], float], repeats: int, warmup: int = 1) -> tuple[float, list[float]]:
    """Run ``fn`` (which returns units done per second) repeatedly; median and all."""
    for _ in range(warmup):
        fn()
    rates = [fn() for _ in range(repeats)]
    return statistics.median(rates), rates


def timed(units: float, body: Callable[[], None]) -> float:
    """Units per second for one call of ``body``."""
    t0 = time.perf_counter()
    body()
    return units / (time.perf_counter() - t0)


def header(title: str) -> None:
    print(f"# {title}")
    print(f"# command: {' '.join([os.path.basename(sys.executable)] + sys.argv)}")
    print(f"# python {platform.python_version()}, {platform.machine()}, {os.cpu_count()} cpus; "
          "medians over repeats; baselines measured in the same run")


def table(rows: Sequence[Sequence[object]], headers: Sequence[str]) -> str:
    cells = [[str(h) for h in headers]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(cells[0], widths)) + " |",
             "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    lines += ["| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |" for r in cells[1:]]
    return "\n".join(lines)
