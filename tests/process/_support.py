"""Fixtures and helpers for the process-stage tests: nothing may outlive a
test -- no worker process, no shared-memory segment of this process."""

from __future__ import annotations

import multiprocessing
import os
import time
from collections.abc import Iterator

import pytest

from feedq.process._shm import PREFIX, pid_alive

SHM_DIR = "/dev/shm"


def own_segments(pid: int | None = None) -> list[str]:
    """Shared-memory segments named for parent ``pid`` (this process by default)."""
    prefix = f"{PREFIX}{os.getpid() if pid is None else pid}_"
    try:
        return sorted(n for n in os.listdir(SHM_DIR) if n.startswith(prefix))
    except FileNotFoundError:  # pragma: no cover - not Linux
        return []


def wait_dead(pids: list[int], timeout: float) -> list[int]:
    """Wait until none of ``pids`` is alive (zombies count as dead); the
    ones still alive at the deadline."""
    deadline = time.monotonic() + timeout
    alive = [p for p in pids if pid_alive(p)]
    while alive and time.monotonic() < deadline:
        time.sleep(0.01)
        alive = [p for p in alive if pid_alive(p)]
    return alive


@pytest.fixture(autouse=True)
def no_process_leaks() -> Iterator[None]:
    """Fail a test that leaves a worker process or a segment behind."""
    before = own_segments()
    yield
    deadline = time.monotonic() + 3.0
    children = multiprocessing.active_children()  # also reaps finished ones
    while children and time.monotonic() < deadline:
        time.sleep(0.01)
        children = multiprocessing.active_children()
    leftover = [n for n in own_segments() if n not in before]
    assert not children, f"worker processes left running: {children}"
    assert not leftover, f"shared-memory segments left behind: {leftover}"
