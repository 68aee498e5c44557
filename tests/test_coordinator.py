"""Tests of feedq.coordinator: Coordinator (C1–C11) and LooperThread (L1–L4).

Every test is bounded; threads are started through helpers that name them
and a fixture fails the test if any thread outlives it. Waiting on a thread
uses Events or joins, never a bare sleep.
"""

from __future__ import annotations

import gc
import logging
import sys
import threading
import time
import traceback
import weakref
from collections.abc import Callable, Iterator

import pytest

from feedq.coordinator import Coordinator, LooperThread
from feedq.errors import CancelledError, OutOfRangeError

pytestmark = pytest.mark.timeout(10)

# Generous bound for "this thread must end now"; failing it means a hang.
JOIN_TIMEOUT = 5.0


@pytest.fixture(autouse=True)
def no_dangling_threads() -> Iterator[None]:
    """Fail a test that leaves a thread running (STYLE 11)."""
    before = set(threading.enumerate())
    yield
    leftover = [t for t in threading.enumerate() if t not in before]
    for t in leftover:
        t.join(JOIN_TIMEOUT)
    alive = [t.name for t in leftover if t.is_alive()]
    assert not alive, f"threads left running: {alive}"


def spawn(
    target: Callable[..., object], *args: object, name: str, coord: Coordinator | None = None
) -> threading.Thread:
    """Start a named thread, registered with ``coord`` before it starts."""
    t = threading.Thread(target=target, args=args, name=name)
    if coord is not None:
        coord.register_thread(t)
    t.start()
    return t


def join_or_fail(*threads: threading.Thread) -> None:
    """Join threads, failing the test if one does not end in time."""
    for t in threads:
        t.join(JOIN_TIMEOUT)
        assert not t.is_alive(), f"thread {t.name} did not end"


def raised(exc: BaseException) -> BaseException:
    """Return ``exc`` after raising and catching it, so it has a traceback."""
    try:
        raise exc
    except BaseException as e:  # noqa: BLE001 - any exception, for the test
        return e


# -- C1–C5 --------------------------------------------------------------------------------


def test_c1_default_clean_types_is_out_of_range() -> None:
    """C1: the default clean type is OutOfRangeError; it stops without an error."""
    coord = Coordinator()
    assert coord.clean_stop_exception_types == (OutOfRangeError,)
    coord.request_stop(OutOfRangeError("end"))
    assert coord.should_stop()
    coord.join()  # nothing recorded, nothing raised


def test_c1_c3_custom_clean_types_replace_the_default() -> None:
    """C1/C3: with (StopIteration,) as clean types, OutOfRangeError is an error."""
    coord = Coordinator(clean_stop_exception_types=(StopIteration,))
    coord.request_stop(OutOfRangeError("end of data"))
    with pytest.raises(OutOfRangeError, match=r"^end of data$"):
        coord.join()
    clean = Coordinator(clean_stop_exception_types=(StopIteration,))
    clean.request_stop(StopIteration())
    clean.join()


def test_c1_clean_types_must_be_exception_classes() -> None:
    """C1: a clean type that is not an exception class is a TypeError."""
    with pytest.raises(
        TypeError, match=r"^clean_stop_exception_types must hold exception classes, got 'x'$"
    ):
        Coordinator(clean_stop_exception_types=("x",))  # type: ignore[arg-type]


def test_c2_should_stop_and_clear_stop() -> None:
    """C2: should_stop flips on request_stop; clear_stop forgets stop, error and joined."""
    coord = Coordinator()
    assert not coord.should_stop()
    coord.request_stop(ValueError("first"))
    assert coord.should_stop()
    with pytest.raises(ValueError, match=r"^first$"):
        coord.join()
    assert coord.joined
    coord.clear_stop()
    assert not coord.should_stop()
    assert not coord.joined
    coord.raise_requested_exception()  # forgotten: raises nothing


def test_c3_only_the_first_stop_request_records() -> None:
    """C3: ValueError then KeyError → join raises the ValueError."""
    coord = Coordinator()
    coord.request_stop(ValueError("first"))
    coord.request_stop(KeyError("second"))
    with pytest.raises(ValueError, match=r"^first$"):
        coord.join()


def test_c3_clean_first_stop_ignores_later_errors() -> None:
    """C3: OutOfRange (or a plain stop) then ValueError → join raises nothing."""
    for first in (OutOfRangeError("end"), None):
        coord = Coordinator()
        coord.request_stop(first)
        coord.request_stop(ValueError("late"))
        coord.join()


def test_c4_records_exactly_the_exception_passed() -> None:
    """C4/X8: inside ``except KeyError`` the ValueError passed is recorded, not the KeyError."""
    coord = Coordinator()
    try:
        raise KeyError("being handled")
    except KeyError:
        coord.request_stop(ValueError("passed"))
    with pytest.raises(ValueError, match=r"^passed$"):
        coord.join()


def test_c4_instance_outside_except_block_is_recorded() -> None:
    """C4/X8: outside an except block an instance is recorded (TF1 crashed here)."""
    coord = Coordinator()
    coord.request_stop(ValueError("no handler"))
    assert coord.should_stop()
    with pytest.raises(ValueError, match=r"^no handler$"):
        coord.raise_requested_exception()


def _fail_deep() -> None:
    raise ValueError("deep")


def test_c4_exc_info_triple_keeps_its_traceback() -> None:
    """C4: an exc_info triple is accepted and the original frames are re-raised."""
    coord = Coordinator()
    try:
        _fail_deep()
    except ValueError:
        coord.request_stop(sys.exc_info())
    with pytest.raises(ValueError, match=r"^deep$") as info:
        coord.join()
    frames = [f.name for f in traceback.extract_tb(info.value.__traceback__)]
    assert "_fail_deep" in frames


def test_c4_exception_from_another_thread_keeps_its_traceback() -> None:
    """C4/X8: an instance caught in a worker thread is re-raised with the worker's frames."""
    coord = Coordinator()

    def worker() -> None:
        try:
            _fail_deep()
        except ValueError as e:
            coord.request_stop(e)

    t = spawn(worker, name="c4-worker", coord=coord)
    with pytest.raises(ValueError, match=r"^deep$") as info:
        coord.join()
    join_or_fail(t)
    assert "_fail_deep" in [f.name for f in traceback.extract_tb(info.value.__traceback__)]


def test_c4_rejects_what_is_not_an_exception() -> None:
    """C4: a non-exception argument is a TypeError and does not stop."""
    coord = Coordinator()
    with pytest.raises(
        TypeError,
        match=r"^ex must be None, an exception instance or an exc_info triple, got 'boom'$",
    ):
        coord.request_stop("boom")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        coord.request_stop(ValueError)  # type: ignore[arg-type]  # a class, not an instance
    assert not coord.should_stop()
    coord.request_stop((None, None, None))  # sys.exc_info() outside except: a plain stop
    assert coord.should_stop()
    coord.join()


def test_c5_wait_for_stop() -> None:
    """C5: wait_for_stop is False on timeout, True once a stop is requested."""
    coord = Coordinator()
    assert coord.wait_for_stop(0) is False
    t0 = time.monotonic()
    assert coord.wait_for_stop(0.05) is False
    assert time.monotonic() - t0 >= 0.04
    waiting = threading.Event()
    result: list[bool] = []

    def waiter() -> None:
        waiting.set()
        result.append(coord.wait_for_stop(JOIN_TIMEOUT))

    t = spawn(waiter, name="c5-waiter")
    assert waiting.wait(JOIN_TIMEOUT)
    coord.request_stop()
    join_or_fail(t)
    assert result == [True]
    assert coord.wait_for_stop() is True
    with pytest.raises(ValueError, match=r"^timeout must be >= 0 seconds or None, got -1.0$"):
        coord.wait_for_stop(-1)


# -- C6–C10: join -----------------------------------------------------------------------


def test_c6_join_returns_promptly_when_threads_end_without_stop() -> None:
    """C6/X5: join is event driven: it returns right after the last thread ends.

    TF1 polled each second; here the return must follow the release by much
    less. should_stop stays False and the registered set is emptied.
    """
    coord = Coordinator()
    go = threading.Event()
    threads = [spawn(go.wait, JOIN_TIMEOUT, name=f"c6-{i}", coord=coord) for i in range(3)]
    returned_at: list[float] = []

    def joiner() -> None:
        coord.join()
        returned_at.append(time.monotonic())

    j = spawn(joiner, name="c6-joiner")
    released_at = time.monotonic()
    go.set()
    join_or_fail(j)
    assert returned_at[0] - released_at < 0.5
    assert not any(t.is_alive() for t in threads)  # join() really joined them
    assert not coord.should_stop()
    assert coord.joined
    coord.join(stop_grace_period_secs=0)  # registered set emptied: nothing to wait for


def test_c6_grace_period_expiry_names_the_live_thread() -> None:
    """C6/QR9: after the grace period, RuntimeError names the thread still running."""
    coord = Coordinator()
    release = threading.Event()
    straggler = spawn(release.wait, JOIN_TIMEOUT, name="straggler", coord=coord)
    coord.request_stop()
    t0 = time.monotonic()
    with pytest.raises(
        RuntimeError, match=r"^Coordinator stopped with threads still running: straggler$"
    ):
        coord.join(stop_grace_period_secs=0.3)
    elapsed = time.monotonic() - t0
    assert 0.25 <= elapsed < 3.0
    assert coord.joined
    release.set()
    join_or_fail(straggler)


def test_c6_ignore_live_threads_only_logs(caplog: pytest.LogCaptureFixture) -> None:
    """C6: ignore_live_threads=True logs the stragglers instead of raising."""
    coord = Coordinator()
    release = threading.Event()
    t = spawn(release.wait, JOIN_TIMEOUT, name="ignored-straggler", coord=coord)
    coord.request_stop()
    with caplog.at_level(logging.INFO, logger="feedq.coordinator"):
        coord.join(stop_grace_period_secs=0.05, ignore_live_threads=True)
    assert "Coordinator stopped with threads still running: ignored-straggler" in caplog.text
    release.set()
    join_or_fail(t)


def test_c6_join_names_all_stragglers_given_and_registered() -> None:
    """C6: join waits for given ∪ registered threads; the message names each straggler."""
    coord = Coordinator()
    release = threading.Event()
    given = spawn(release.wait, JOIN_TIMEOUT, name="given")  # not registered
    registered = spawn(release.wait, JOIN_TIMEOUT, name="registered", coord=coord)
    coord.request_stop()
    with pytest.raises(
        RuntimeError, match=r"^Coordinator stopped with threads still running: given registered$"
    ):
        coord.join([given], stop_grace_period_secs=0.05)
    release.set()
    join_or_fail(given, registered)


def test_c6_recorded_exception_wins_over_stragglers() -> None:
    """C6: a recorded exception is raised even when threads are still alive."""
    coord = Coordinator()
    release = threading.Event()
    t = spawn(release.wait, JOIN_TIMEOUT, name="c6-alive", coord=coord)
    coord.request_stop(ValueError("the error"))
    with pytest.raises(ValueError, match=r"^the error$"):
        coord.join(stop_grace_period_secs=0.05)
    release.set()
    join_or_fail(t)


def test_c6_threads_ending_in_the_grace_period_join_cleanly() -> None:
    """C6: after a stop, threads that end within the grace period give a clean join."""
    coord = Coordinator()
    threads = [
        spawn(coord.wait_for_stop, JOIN_TIMEOUT, name=f"c6-stopper-{i}", coord=coord)
        for i in range(3)
    ]
    coord.request_stop()
    t0 = time.monotonic()
    coord.join(stop_grace_period_secs=JOIN_TIMEOUT)
    assert time.monotonic() - t0 < 1.0  # woken by the threads' ends, not the grace period
    assert not any(t.is_alive() for t in threads)


def test_c6_negative_grace_period_is_rejected() -> None:
    """C6: a negative grace period is a ValueError."""
    with pytest.raises(ValueError, match=r"^stop_grace_period_secs must be >= 0, got -1$"):
        Coordinator().join(stop_grace_period_secs=-1)


def test_c7_join_waits_while_threads_run_and_no_stop() -> None:
    """C7: the grace period starts only at the stop; before it join waits for ever."""
    coord = Coordinator()
    release = threading.Event()
    worker = spawn(release.wait, JOIN_TIMEOUT, name="c7-worker", coord=coord)
    errors: list[BaseException] = []

    def joiner() -> None:
        try:
            coord.join(stop_grace_period_secs=0.1)
        except BaseException as e:  # noqa: BLE001 - reported to the test
            errors.append(e)

    j = spawn(joiner, name="c7-joiner")
    j.join(0.5)
    assert j.is_alive(), "join() returned although no stop was requested"
    coord.request_stop()
    join_or_fail(j)  # grace 0.1 s expired: RuntimeError naming the worker
    assert [str(e) for e in errors] == ["Coordinator stopped with threads still running: c7-worker"]
    release.set()
    join_or_fail(worker)


def test_c8_request_stop_after_join_raises_at_once() -> None:
    """C8: after join, request_stop(error) raises it; a plain or clean stop returns."""
    coord = Coordinator()
    coord.request_stop()
    coord.join()
    with pytest.raises(ValueError, match=r"^too late$"):
        coord.request_stop(ValueError("too late"))
    coord.request_stop()
    coord.request_stop(OutOfRangeError("clean"))
    coord.clear_stop()  # resets joined
    coord.request_stop(ValueError("recorded"))
    with pytest.raises(ValueError, match=r"^recorded$"):
        coord.join()


def test_c9_raise_requested_exception() -> None:
    """C9: raise_requested_exception raises the recorded error, else nothing."""
    coord = Coordinator()
    coord.raise_requested_exception()
    coord.request_stop(raised(KeyError("k")))
    with pytest.raises(KeyError):
        coord.raise_requested_exception()
    assert not coord.joined  # it does not join


def test_c10_registered_threads_are_joined() -> None:
    """C10: join() with no list joins the registered threads."""
    coord = Coordinator()
    go = threading.Event()
    t = spawn(go.wait, JOIN_TIMEOUT, name="c10-registered", coord=coord)
    go.set()
    coord.join()
    assert not t.is_alive()


def test_c10_thread_registered_after_start_wakes_join() -> None:
    """C10: a thread registered after it started is watched; its end wakes join promptly."""
    coord = Coordinator()
    go = threading.Event()
    t = spawn(go.wait, JOIN_TIMEOUT, name="c10-late")
    coord.register_thread(t)
    returned_at: list[float] = []

    def joiner() -> None:
        coord.join()
        returned_at.append(time.monotonic())

    j = spawn(joiner, name="c10-joiner")
    released_at = time.monotonic()
    go.set()
    join_or_fail(j)
    assert returned_at[0] - released_at < 0.5
    assert not t.is_alive()


def test_c10_thread_registered_with_two_coordinators_wakes_both() -> None:
    """C10: a thread registered with two coordinators before start wakes both joins."""
    first, second = Coordinator(), Coordinator()
    go = threading.Event()
    t = threading.Thread(target=go.wait, args=(JOIN_TIMEOUT,), name="c10-shared")
    first.register_thread(t)
    second.register_thread(t)
    t.start()
    go.set()
    t0 = time.monotonic()
    first.join()
    second.join()
    assert time.monotonic() - t0 < 1.0
    assert not t.is_alive()


def test_c10_joined_thread_is_not_kept_alive_by_the_coordinator() -> None:
    """C10: registering wraps run() without a reference cycle; a joined thread is freed."""
    coord = Coordinator()
    gc.disable()  # prove there is no cycle: freed by reference counting alone
    try:
        t = threading.Thread(target=lambda: None, name="c10-freed")
        coord.register_thread(t)
        t.start()
        coord.join()
        ref = weakref.ref(t)
        del t
        assert ref() is None
    finally:
        gc.enable()


# -- C11 / X8: stop_on_exception ----------------------------------------------------------


def test_c11_stop_on_exception_swallows_and_records() -> None:
    """C11: an exception escaping the body requests a stop and is swallowed."""
    coord = Coordinator()
    with coord.stop_on_exception():
        raise ValueError("in body")
    assert coord.should_stop()
    with pytest.raises(ValueError, match=r"^in body$"):
        coord.join()


def test_c11_stop_on_exception_clean_and_no_exception() -> None:
    """C11: OutOfRange gives a clean stop; a body that does not raise does not stop."""
    coord = Coordinator()
    with coord.stop_on_exception():
        pass
    assert not coord.should_stop()
    with coord.stop_on_exception():
        raise OutOfRangeError("end")
    assert coord.should_stop()
    coord.join()


@pytest.mark.parametrize("exc_type", [KeyboardInterrupt, SystemExit])
def test_x8_stop_on_exception_lets_keyboard_interrupt_propagate(
    exc_type: type[BaseException],
) -> None:
    """X8 (feedq deviation from C11): KeyboardInterrupt/SystemExit stop, then propagate."""
    coord = Coordinator()
    callback_saw: list[BaseException | None] = []
    coord.add_stop_callback(callback_saw.append)
    with pytest.raises(exc_type), coord.stop_on_exception():
        raise exc_type()
    assert coord.should_stop()
    assert len(callback_saw) == 1 and isinstance(callback_saw[0], exc_type)
    with pytest.raises(exc_type):  # recorded: join re-raises it too
        coord.join()


def test_c11_c8_stop_on_exception_after_join_propagates() -> None:
    """C11/C8: after join, request_stop raises, so the body's error propagates."""
    coord = Coordinator()
    coord.join()
    with pytest.raises(ValueError, match=r"^after join$"), coord.stop_on_exception():
        raise ValueError("after join")


# -- stop callbacks (X5) ------------------------------------------------------------------


def test_x5_stop_callback_runs_once_in_the_requesting_thread() -> None:
    """X5: a stop callback runs once, in the requesting thread, with the recorded cause."""
    coord = Coordinator()
    seen: list[tuple[str, BaseException | None]] = []

    def callback(cause: BaseException | None) -> None:
        seen.append((threading.current_thread().name, cause))

    coord.add_stop_callback(callback)
    coord.add_stop_callback(callback)  # already pending: not added twice
    error = ValueError("cause")
    t = spawn(coord.request_stop, error, name="x5-requester")
    join_or_fail(t)
    coord.request_stop()  # second stop: the callback does not run again
    assert seen == [("x5-requester", error)]
    with pytest.raises(ValueError, match=r"^cause$"):
        coord.join()


def test_x5_stop_callback_added_after_stop_runs_at_once() -> None:
    """X5: a callback added to a stopped coordinator runs at once; a clean stop gives None."""
    coord = Coordinator()
    coord.request_stop(OutOfRangeError("clean"))
    seen: list[BaseException | None] = []
    coord.add_stop_callback(seen.append)
    assert seen == [None]


def test_x5_failing_stop_callback_is_logged_and_others_still_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """X5: an exception in a callback is logged and ignored; later callbacks run."""
    coord = Coordinator()
    seen: list[BaseException | None] = []

    def bad(cause: BaseException | None) -> None:
        raise CancelledError("callback failed")

    coord.add_stop_callback(bad)
    coord.add_stop_callback(seen.append)
    with caplog.at_level(logging.WARNING, logger="feedq.coordinator"):
        coord.request_stop()
    assert seen == [None]
    assert "Ignored exception in stop callback" in caplog.text


def test_x5_removed_stop_callback_does_not_run() -> None:
    """X5: remove_stop_callback forgets a pending callback."""
    coord = Coordinator()
    seen: list[BaseException | None] = []
    coord.add_stop_callback(seen.append)
    assert coord.remove_stop_callback(seen.append) is True
    assert coord.remove_stop_callback(seen.append) is False
    coord.request_stop()
    assert seen == []


# -- LooperThread (L1–L4) -----------------------------------------------------------------


def test_l1_validation_and_registration() -> None:
    """L1: a non-Coordinator or args without target is a ValueError; it registers itself."""
    with pytest.raises(ValueError, match=r"^'coord' argument must be a Coordinator: None$"):
        LooperThread(None, 1.0)  # type: ignore[arg-type]
    coord = Coordinator()
    with pytest.raises(
        ValueError, match=r"^'args' and 'kwargs' argument require that you also pass 'target'$"
    ):
        LooperThread(coord, 1.0, args=(1,))
    with pytest.raises(
        ValueError, match=r"^timer_interval_secs must be a finite number >= 0 or None, got -1.0$"
    ):
        LooperThread(coord, -1)
    looper = LooperThread(coord, None, target=coord.request_stop)
    assert looper.daemon
    assert looper.name == "feedq-looper-request_stop"
    looper.start()  # it stops the coordinator on its first call
    coord.join()  # registered on construction: joined here
    assert not looper.is_alive()


def test_l2_fixed_rate_without_drift() -> None:
    """L2: calls at start + k*interval even though each call takes a while.

    Each call works 40 ms of a 100 ms interval; a loop that waited the
    interval after each call would drift to 140 ms per call. Bounds are loose
    for a noisy machine.
    """
    coord = Coordinator()
    interval, work, calls = 0.1, 0.04, 6
    times: list[float] = []

    def tick() -> None:
        times.append(time.monotonic())
        if len(times) == calls:
            coord.request_stop()
            return
        time.sleep(work)  # simulated work, not a wait for a thread

    LooperThread.loop(coord, interval, tick)
    coord.join(stop_grace_period_secs=JOIN_TIMEOUT)
    assert len(times) == calls
    t0 = times[0]
    for k, t in enumerate(times):
        assert t >= t0 + k * interval - 0.005, f"call {k} early"
    span = times[-1] - t0
    assert (calls - 1) * interval - 0.005 <= span < (calls - 1) * (interval + work) - 0.05


def test_l2_back_to_back_and_hook_order() -> None:
    """L2: interval None calls run_loop back to back; hooks run start, run..., stop."""
    coord = Coordinator()
    events: list[str] = []

    class Looper(LooperThread):
        def start_loop(self) -> None:
            events.append("start")

        def run_loop(self) -> None:
            events.append("run")
            if events.count("run") == 3:
                coord.request_stop()

        def stop_loop(self) -> None:
            events.append("stop")

    looper = Looper(coord, None)
    assert looper.name == "feedq-looper-Looper"
    looper.start()
    coord.join()
    assert events == ["start", "run", "run", "run", "stop"]


def test_l2_wait_between_calls_is_interrupted_by_stop() -> None:
    """L2: a stop ends the wait between calls at once, not at the next boundary."""
    coord = Coordinator()
    first_call = threading.Event()
    calls: list[int] = []

    def tick() -> None:
        calls.append(1)
        first_call.set()

    looper = LooperThread.loop(coord, 60.0, tick)
    assert first_call.wait(JOIN_TIMEOUT)  # the first call is immediate
    t0 = time.monotonic()
    coord.request_stop()
    coord.join(stop_grace_period_secs=JOIN_TIMEOUT)
    assert time.monotonic() - t0 < 1.0
    assert not looper.is_alive()
    assert calls == [1]


def test_l2_kwargs_are_passed_to_target() -> None:
    """L2: the default run_loop calls target(*args, **kwargs)."""
    coord = Coordinator()
    got: list[tuple[int, str]] = []

    def target(a: int, *, b: str) -> None:
        got.append((a, b))
        coord.request_stop()

    LooperThread.loop(coord, None, target, args=(1,), kwargs={"b": "x"})
    coord.join()
    assert got == [(1, "x")]


def test_l3_exception_in_run_loop_is_reported_and_stop_loop_skipped() -> None:
    """L3: raising on the 3rd call → 3 calls, join raises it, stop_loop not called."""
    coord = Coordinator()
    events: list[str] = []

    class Failing(LooperThread):
        def run_loop(self) -> None:
            events.append("run")
            if len(events) == 3:
                raise ValueError("third call")

        def stop_loop(self) -> None:
            events.append("stop")

    Failing(coord, 0.001).start()
    with pytest.raises(ValueError, match=r"^third call$"):
        coord.join(stop_grace_period_secs=JOIN_TIMEOUT)
    assert events == ["run", "run", "run"]


def test_l4_loop_starts_and_returns_the_thread() -> None:
    """L4: LooperThread.loop constructs, starts and returns a registered thread."""
    coord = Coordinator()
    called = threading.Event()
    looper = LooperThread.loop(coord, 0.01, called.set)
    assert isinstance(looper, LooperThread)
    assert called.wait(JOIN_TIMEOUT)
    assert looper.is_alive() or looper.ident is not None
    coord.request_stop()
    coord.join(stop_grace_period_secs=JOIN_TIMEOUT)
    assert not looper.is_alive()


# -- issue 10/11: LooperThread interval 0, bounded watchers, thread names -------------------


def test_l2_interval_zero_runs_back_to_back_until_stop() -> None:
    """L2/L4: ``timer_interval_secs=0`` is accepted, as in TF1: run_loop is
    called back to back, and the stop is checked before every call."""
    coord = Coordinator()
    calls: list[int] = []

    def tick() -> None:
        calls.append(len(calls))
        if len(calls) == 5:
            coord.request_stop()

    looper = LooperThread.loop(coord, 0, target=tick)
    assert looper.name == "feedq-looper-tick"
    coord.join(stop_grace_period_secs=JOIN_TIMEOUT)
    assert calls == [0, 1, 2, 3, 4]  # no call after the stop
    assert not looper.is_alive()


def test_c10_watcher_of_a_straggler_ends_after_join_gives_up() -> None:
    """C6/C10: join() never waits without a bound on its helpers: the watcher
    of a thread registered after it started (``feedq-coord-watch-<name>``)
    ends soon after join() returned, although that thread still runs."""
    coord = Coordinator()
    release = threading.Event()
    t = spawn(release.wait, 2 * JOIN_TIMEOUT, name="c10-straggler")
    coord.register_thread(t)
    errors: list[BaseException] = []

    def joiner() -> None:
        try:
            coord.join(stop_grace_period_secs=0.05)
        except RuntimeError as exc:
            errors.append(exc)

    j = spawn(joiner, name="c10-joiner")
    deadline = time.monotonic() + JOIN_TIMEOUT
    watchers: list[threading.Thread] = []
    while not watchers:  # no event tells us the watcher started: look for it
        assert time.monotonic() < deadline, "no watcher thread started"
        watchers = [w for w in threading.enumerate() if w.name == "feedq-coord-watch-c10-straggler"]
        time.sleep(0.001)
    coord.request_stop()
    join_or_fail(j)
    assert [str(e) for e in errors] == ["Coordinator stopped with threads still running: c10-straggler"]
    join_or_fail(*watchers)  # ended on its own, within one watch slice
    assert t.is_alive()  # ...while the watched thread still runs
    release.set()
    join_or_fail(t)
