"""control_dependencies (feedq/runners.py): gates that hold a runner back until
an event is set, a runner has ended or a queue is drained; a stop releases them."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

import feedq

pytestmark = pytest.mark.timeout(30)


@pytest.fixture(autouse=True)
def _clean_collections() -> Iterator[None]:
    feedq.clear_queue_runners()
    yield
    feedq.clear_queue_runners()


def test_control_dependencies_postpone_a_runner() -> None:
    gate = threading.Event()
    with feedq.Pipeline() as pipe:
        first = feedq.range_input_producer(3, num_epochs=1, shuffle=False, name="first")
        with feedq.control_dependencies([gate, first]):
            later = feedq.range_input_producer(2, num_epochs=1, shuffle=False, name="later")
        assert later.queue.size() == 0
        assert [int(v) for v in first] == [0, 1, 2]
        assert later.queue.size() == 0  # still waiting for the event
        gate.set()
        assert [int(v) for v in later] == [0, 1]
        del pipe
    with pytest.raises(TypeError), feedq.control_dependencies([42]):
        pass


def test_control_dependencies_gate_released_by_stop() -> None:
    never = threading.Event()
    with feedq.Pipeline():
        with feedq.control_dependencies([never]):
            s = feedq.range_input_producer(2, num_epochs=1)
        with pytest.raises(feedq.errors.DeadlineExceededError):
            s.dequeue(timeout=0.05)


@pytest.fixture
def no_gate_recheck(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the gate's safety re-check far longer than any test: a gate that
    opens in time was woken by a notification, not by a poll."""
    from feedq import runners as _control

    monkeypatch.setattr(_control, "_GATE_RECHECK_SECS", 60.0)


@pytest.mark.usefixtures("no_gate_recheck")
def test_gate_opens_when_the_runner_it_waits_for_ends() -> None:
    with feedq.Pipeline():
        first = feedq.range_input_producer(3, num_epochs=1, shuffle=False, name="first")
        with feedq.control_dependencies([first.runner]):
            later = feedq.range_input_producer(2, num_epochs=1, shuffle=False, name="later")
        # first's runner ends after enqueuing its one epoch, without a consumer.
        assert [int(later.dequeue(timeout=5)), int(later.dequeue(timeout=5))] == [0, 1]
        assert first.statistics().runner.threads_alive == 0
        assert [int(v) for v in first] == [0, 1, 2]


@pytest.mark.usefixtures("no_gate_recheck")
def test_gate_opens_when_the_queue_it_waits_for_is_drained() -> None:
    with feedq.Pipeline():
        first = feedq.range_input_producer(3, num_epochs=1, shuffle=False, name="first")
        with feedq.control_dependencies([first.queue]):
            later = feedq.range_input_producer(2, num_epochs=1, shuffle=False, name="later")
        assert [int(v) for v in first] == [0, 1, 2]  # drained and closed
        assert [int(v) for v in later] == [0, 1]


@pytest.mark.usefixtures("no_gate_recheck")
def test_gate_opens_when_the_event_is_set_and_a_stop_releases_it() -> None:
    go, never = threading.Event(), threading.Event()
    pipe = feedq.Pipeline(stop_grace_period_secs=5)
    with pipe:
        with feedq.control_dependencies([go]):
            later = feedq.range_input_producer(2, num_epochs=1, shuffle=False, name="later")
        with feedq.control_dependencies([never]):
            held = feedq.range_input_producer(2, num_epochs=1, name="held")
        with pytest.raises(feedq.errors.DeadlineExceededError):
            later.dequeue(timeout=0.05)
        go.set()
        assert [int(v) for v in later] == [0, 1]
        assert held.queue.size() == 0
    # The exit's stop released the gate on `never` (join would have named
    # the thread otherwise); its helper thread ends within one slice.
    assert not [t for t in pipe.threads if t.is_alive()]
    from tests.conftest import wait_until

    wait_until(lambda: not [t for t in threading.enumerate() if t.name.startswith("feedq-gate-")],
               what="the gate helpers to end")
