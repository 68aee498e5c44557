"""Loader threads' OS priority (feedq._core.priority): runner threads and
process-stage workers run ``loader_niceness`` steps below their starter."""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterator

import numpy as np
import pytest

import feedq
from feedq._core import priority
from tests.process import _builds as builds
from tests.process._support import no_process_leaks  # noqa: F401

pytestmark = pytest.mark.timeout(60)
linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread niceness is Linux's")


@pytest.fixture(autouse=True)
def _restore_niceness() -> Iterator[None]:
    previous = feedq.loader_niceness()
    yield
    feedq.set_loader_niceness(previous)


def _own_niceness() -> int:
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


def _runner_niceness(**pipeline_args: int) -> int:
    q = feedq.FIFOQueue(4, [np.int64], shapes=[[]])
    seen: list[int] = []

    def op() -> None:
        seen.append(_own_niceness())
        q.enqueue(1)

    with feedq.Pipeline(**pipeline_args) as pipe:
        feedq.add_queue_runner(feedq.QueueRunner(q, [op]))
        q.dequeue(timeout=10)
        pipe.stop()
    return seen[0]


@linux_only
def test_runner_threads_run_the_set_steps_below_the_starting_thread() -> None:
    base = _own_niceness()
    feedq.set_loader_niceness(0)
    assert _runner_niceness() == base
    feedq.set_loader_niceness(5)
    assert _runner_niceness() == min(19, base + 5)
    assert _runner_niceness(loader_niceness=2) == min(19, base + 2)  # the pipeline's own
    assert _own_niceness() == base  # the starting thread keeps its priority


@linux_only
def test_create_threads_takes_a_niceness_and_caps_it_at_19() -> None:
    q = feedq.FIFOQueue(2, [np.int64], shapes=[[]])
    seen: list[int] = []

    def op() -> None:
        seen.append(_own_niceness())
        q.enqueue(1)

    runner = feedq.QueueRunner(q, [op])
    threads = runner.create_threads(start=True, daemon=True, niceness=19)
    assert q.dequeue(timeout=10) == 1
    q.close(cancel_pending_enqueues=True)
    for t in threads:
        t.join(10)
    assert seen[0] == 19


def test_bad_values_are_refused_with_the_name_of_what_was_wrong() -> None:
    with pytest.raises(ValueError, match="from 0 to 19"):
        feedq.set_loader_niceness(20)
    with pytest.raises(ValueError, match="from 0 to 19"):
        feedq.set_loader_niceness(-1)
    with pytest.raises(TypeError, match="int"):
        feedq.set_loader_niceness(True)
    with pytest.raises(ValueError, match="loader_niceness"):
        feedq.Pipeline(loader_niceness=-3)
    q = feedq.FIFOQueue(2, [np.int64], shapes=[[]])
    with pytest.raises(TypeError, match="niceness"):
        feedq.QueueRunner(q, [lambda: None]).create_threads(niceness=1.5)  # type: ignore[arg-type]


def test_the_environment_variable_sets_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(priority, "_niceness", None)
    monkeypatch.setenv(priority.ENV_VAR, "7")
    assert feedq.loader_niceness() == 7
    monkeypatch.setattr(priority, "_niceness", None)
    monkeypatch.setenv(priority.ENV_VAR, "")
    assert feedq.loader_niceness() == priority.DEFAULT_NICENESS
    monkeypatch.setattr(priority, "_niceness", None)
    monkeypatch.setenv(priority.ENV_VAR, "lots")
    with pytest.raises(ValueError, match="FEEDQ_LOADER_NICENESS='lots'"):
        feedq.loader_niceness()
    monkeypatch.setattr(priority, "_niceness", None)


@linux_only
def test_process_stage_workers_run_below_the_parent_and_their_runners_no_further() -> None:
    base = os.getpriority(os.PRIO_PROCESS, 0)
    feedq.set_loader_niceness(4)
    with feedq.process_stage(builds.niceness_report, 1) as stage:
        batches = list(stage)
    assert len(batches) == 1
    want = min(19, base + 4)
    assert int(batches[0]["main"][0]) == want
    assert int(batches[0]["runner"][0]) == want  # inherited, not lowered twice
    assert os.getpriority(os.PRIO_PROCESS, 0) == base


@linux_only
def test_a_process_stage_built_in_a_pipeline_takes_the_pipelines_niceness() -> None:
    base = os.getpriority(os.PRIO_PROCESS, 0)
    feedq.set_loader_niceness(1)
    with feedq.Pipeline(loader_niceness=3), feedq.process_stage(builds.niceness_report, 1) as stage:
        batches = list(stage)
    assert int(batches[0]["main"][0]) == min(19, base + 3)
