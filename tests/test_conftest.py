"""The test infrastructure itself (tests/conftest.py): leftover threads and
thread exceptions fail a test, waits fail at their deadline."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from feedq.errors import OutOfRangeError
from tests.conftest import check_no_leftover_threads, closed_queue, join_or_fail, wait_until

pytest_plugins = ["pytester"]

CONFTEST = Path(__file__).with_name("conftest.py")

INNER_TESTS = '''
import threading

from conftest import wait_until

RELEASE = threading.Event()


def test_leaks_a_daemon_feedq_thread():
    threading.Thread(target=RELEASE.wait, name="feedq-leaky", daemon=True).start()


def test_leaks_a_non_daemon_thread():
    threading.Thread(target=RELEASE.wait, args=(3,), name="plain-leaky").start()


def test_a_daemon_thread_of_another_library_is_not_ours():
    threading.Thread(target=RELEASE.wait, args=(3,), name="other-lib", daemon=True).start()


def test_a_thread_raises():
    t = threading.Thread(target=lambda: 1 / 0, name="feedq-boom")
    t.start()
    t.join()


def test_an_expected_thread_exception(thread_exceptions):
    t = threading.Thread(target=lambda: 1 / 0, name="feedq-expected")
    t.start()
    t.join()
    assert [a.exc_type for a in thread_exceptions] == [ZeroDivisionError]
    thread_exceptions.clear()


def test_wait_until_fails_at_its_deadline():
    wait_until(lambda: False, 0.05, "the impossible")


def test_clean():
    t = threading.Thread(target=lambda: None, name="feedq-short-lived")
    t.start()


def test_zz_release():
    RELEASE.set()
'''


@pytest.mark.timeout(120)
def test_conftest_fails_leaks_thread_errors_and_missed_deadlines(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(CONFTEST.read_text(encoding="utf-8") + "\nLEFTOVER_GRACE_SECS = 0.3\n")
    pytester.makepyfile(test_inner=INNER_TESTS)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-W", "error")
    outcomes = result.parseoutcomes()
    out = result.stdout.str()
    # Leaks and thread errors fail at teardown (reported as errors), a missed
    # deadline fails the test; everything else passes.
    assert outcomes.get("errors") == 3, out
    assert outcomes.get("failed") == 1, out
    assert outcomes.get("passed") == 7, out  # every call but the missed deadline
    result.stdout.re_match_lines([
        r".*test left threads running after a 0.3 s grace: \['feedq-leaky \(daemon\)'\].*",
        r".*test left threads running after a 0.3 s grace: \['plain-leaky'\].*",
        r".*exceptions escaped threads during the test:.*",
        r".*timed out after 0.05 s waiting for the impossible.*",
    ], consecutive=False)
    assert "feedq-boom: ZeroDivisionError" in out
    assert "other-lib" not in out.split("short test summary")[-1]
    assert "feedq-expected" not in out


def test_leftover_check_names_feedq_daemon_threads() -> None:
    before = set(threading.enumerate())
    release = threading.Event()
    t = threading.Thread(target=release.wait, name="feedq-test-leak", daemon=True)
    t.start()
    try:
        with pytest.raises(pytest.fail.Exception, match=r"\['feedq-test-leak \(daemon\)'\]"):
            check_no_leftover_threads(before, grace=0.05)
    finally:
        release.set()
        join_or_fail(t)
    check_no_leftover_threads(before, grace=1.0)  # ended: nothing left


def test_leftover_check_waits_for_threads_that_are_ending() -> None:
    before = set(threading.enumerate())
    go = threading.Event()
    t = threading.Thread(target=go.wait, name="feedq-test-ending", daemon=True)
    t.start()
    timer = threading.Timer(0.05, go.set)
    timer.start()
    check_no_leftover_threads(before, grace=5.0)  # joins within the grace
    assert not t.is_alive()
    join_or_fail(timer)


def test_thread_exceptions_are_collected(thread_exceptions: list[threading.ExceptHookArgs]) -> None:
    def fail() -> None:
        raise KeyError("from a thread")

    t = threading.Thread(target=fail, name="feedq-test-raiser")
    t.start()
    join_or_fail(t)
    assert [(a.exc_type, a.thread.name if a.thread else None) for a in thread_exceptions] == [
        (KeyError, "feedq-test-raiser")
    ]
    thread_exceptions.clear()  # expected: the fixture must not fail this test


def test_wait_until_fails_naming_what_it_waited_for() -> None:
    with pytest.raises(pytest.fail.Exception, match=r"^timed out after 0.01 s waiting for the moon$"):
        wait_until(lambda: False, 0.01, "the moon")
    wait_until(lambda: True, 0.0, "no wait needed")


def test_join_or_fail_fails_on_a_live_thread() -> None:
    release = threading.Event()
    t = threading.Thread(target=release.wait, name="feedq-test-live", daemon=True)
    t.start()
    with pytest.raises(pytest.fail.Exception, match=r"^thread feedq-test-live did not end within 0.01 s$"):
        join_or_fail(t, 0.01)
    release.set()
    join_or_fail(t)


def test_closed_queue_holds_the_items_then_ends() -> None:
    q = closed_queue(["a.txt", b"b.txt"])
    assert q.is_closed()
    assert [q.dequeue(), q.dequeue()] == [b"a.txt", b"b.txt"]
    with pytest.raises(OutOfRangeError):
        q.dequeue(timeout=0)
    nums = closed_queue(range(3), dtype=np.int64)
    assert nums.dequeue_up_to(5).tolist() == [0, 1, 2]


@pytest.mark.timeout(60)
def test_ray_module_tests_are_marked_slow(pytester: pytest.Pytester) -> None:
    # Nothing here starts a thread: the inner runs can share this process.
    pytester.makeconftest(CONFTEST.read_text(encoding="utf-8"))
    pytester.makeini("[pytest]\nmarkers =\n    slow: slow\n")
    pytester.mkpydir("distributed")
    pytester.makepyfile(**{"distributed/test_ray": "def test_a():\n    pass\n",
                           "distributed/test_local": "def test_c():\n    pass\n",
                           "test_ray": "def test_d():\n    pass\n",
                           "test_other": "def test_b():\n    pass\n"})
    slow = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--strict-markers", "-m", "slow", "-v")
    slow.assert_outcomes(passed=1, deselected=3)
    slow.stdout.fnmatch_lines(["*distributed/test_ray.py::test_a PASSED*"])
    quick = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-m", "not slow", "-v")
    quick.assert_outcomes(passed=3, deselected=1)
    quick.stdout.fnmatch_lines(["*test_other.py::test_b PASSED*"])
    quick.stdout.no_fnmatch_line("*distributed/test_ray.py::test_a*")


def test_property_tests_have_no_wall_clock_deadline() -> None:
    from hypothesis import settings

    assert settings.default.deadline is None


def test_fake_clock_moves_only_when_advanced() -> None:
    from tests.conftest import Bg, FakeClock

    clock = FakeClock()
    start = clock.now()
    stop = threading.Event()
    waiter = Bg(clock.wait, stop, 1.0, name="fake-clock-waiter")
    wait_until(lambda: clock.waiting == 1, what="the waiter")
    clock.advance(0.5)
    assert clock.now() == start + 0.5 and not waiter.done.is_set() and clock.waiting == 1
    clock.advance(0.5)
    assert waiter.result() is False  # the clock's timeout passed, not the event
    stopped = Bg(clock.wait, stop, 60.0, name="fake-clock-stopped")
    wait_until(lambda: clock.waiting == 1, what="the second waiter")
    stop.set()
    assert stopped.result() is True and clock.now() == start + 1.0
    clock.sync()
    assert clock.now() >= start + 1.0


# -- tests/_forkserver.py: a forked child is what `python ...` would have been -----------------

_PROBE = """
import json, os, sys, threading
printed = threading.Event()
threading.Thread(target=lambda: printed.wait() and print("non-daemon thread joined at exit")).start()
print(json.dumps({"argv": sys.argv, "path0": sys.path[0], "cwd": os.getcwd(), "name": __name__,
                  "var": os.environ.get("FEEDQ_PROBE"), "main_file": hasattr(sys.modules["__main__"], "__file__")}))
print("to stderr", file=sys.stderr, flush=True)
sys.stdout.flush()
printed.set()
sys.exit(int(sys.argv[-1]))
"""


@pytest.mark.timeout(60)
def test_the_fork_server_runs_what_python_runs(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    from tests import _forkserver as forkserver

    script = tmp_path / "probe.py"
    script.write_text(_PROBE)
    env = dict(os.environ, FEEDQ_PROBE="yes")
    for argv in (["-c", _PROBE, "x", "3"], [str(script), "0"]):
        fresh = subprocess.run([sys.executable, *argv], capture_output=True, text=True, timeout=50, env=env,
                               cwd=tmp_path)
        forked = forkserver.run(argv, env=env, cwd=tmp_path, timeout=50)
        assert (forked.returncode, forked.stdout, forked.stderr) == (fresh.returncode, fresh.stdout, fresh.stderr)
        assert fresh.returncode == int(argv[-1]) and "non-daemon thread joined" in fresh.stdout
    module = forkserver.run(["-m", "feedq.cli", "--version"], cwd=tmp_path, timeout=50)
    assert module.returncode == 0 and module.stdout.startswith("feedq"), module.stderr
    failed = forkserver.run(["-c", "raise ValueError('boom')"], timeout=50)
    assert failed.returncode == 1 and failed.stderr.rstrip().endswith("ValueError: boom")
    with pytest.raises(subprocess.TimeoutExpired):
        forkserver.run(["-c", "import time; time.sleep(60)"], timeout=0.5)


@pytest.mark.timeout(60)
def test_fork_server_children_run_side_by_side_with_stdin_and_signals() -> None:
    import signal

    from tests import _forkserver as forkserver

    code = "import sys; data = sys.stdin.read(); print(len(data))"
    children = [forkserver.popen(["-c", code], stdin_pipe=True) for _ in range(3)]
    assert [c.poll() for c in children] == [None, None, None]  # all blocked reading stdin
    a, b, c = children
    assert a.stdin is not None and b.stdin is not None
    a.stdin.write(b"12345")
    a.stdin.close()
    assert a.wait(30) == 0 and a.output() == ("5\n", "")
    b.kill()
    assert b.wait(30) == -signal.SIGKILL and c.poll() is None
    c.send_signal(signal.SIGINT)  # KeyboardInterrupt: python dies of SIGINT
    assert c.wait(30) == -signal.SIGINT and "KeyboardInterrupt" in c.output()[1]
    b.output()
