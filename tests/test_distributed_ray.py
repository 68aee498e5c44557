"""feedq.distributed on Ray: the semantic cases of test_distributed_local run
again on a simulated multi-task cluster, plus what only several processes
show (shared state across clients, client and server deaths, the
coordinator across processes, the examples).

One private Ray runtime serves the whole module (session fixture): every
task is a custom resource on the one node, all traffic stays on 127.0.0.1,
processes share one auth token, sockets live in a short temp dir, and
teardown kills leftover Ray processes by recorded PID (never ``ray stop``).
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# Ray reads these when imported, so they come before the import (issue 7).
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("RAY_AUTH_MODE", "token")
os.environ.setdefault("RAY_AUTH_TOKEN", secrets.token_hex(16))

ray = pytest.importorskip("ray")

import numpy as np

import feedq.distributed as fd
from feedq.errors import DeadlineExceededError, InvalidArgumentError, UnavailableError

from . import test_distributed_local as cases
from .test_distributed_local import DIST_TASKS, SPEC, Dist

pytestmark = [
    # Ray's own deprecations and unclosed sockets, not ours (narrowly).
    pytest.mark.filterwarnings("ignore::DeprecationWarning:ray.*"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning:google.*"),
]

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted(p for p in (ROOT / "examples" / "distributed").glob("*.py")
                  if not p.name.startswith("_"))


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[fd.LocalCluster]:
    lc = fd.LocalCluster(SPEC, backend="ray", namespace=f"t{uuid.uuid4().hex[:6]}")
    lc.start()
    try:
        yield lc
    finally:
        lc.stop()


@pytest.fixture()
def dist(ray_cluster: fd.LocalCluster) -> Iterator[Dist]:
    fd.connect(SPEC, backend="ray", namespace=ray_cluster.namespace)
    yield Dist("ray", ray_cluster)
    for task in list(DIST_TASKS):
        fd.default_session().set_operation_timeout(None, task=task)


# The same semantic cases as on the local backend (collected here with this
# module's `dist` fixture).
for _name in cases.SEMANTIC_CASES:
    globals()[_name] = getattr(cases, _name)
del _name


def _client(code: str, lc: fd.LocalCluster, **kw: Any) -> subprocess.Popen[str]:
    """Start a client process of the cluster running ``code``."""
    prelude = "import numpy as np, feedq, feedq.distributed as fd\nfd.connect()\n"
    return subprocess.Popen([sys.executable, "-c", prelude + textwrap.dedent(code)],
                            env=lc.env, cwd=ROOT, text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, **kw)


def _wait(pred: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def test_everything_listens_on_loopback(ray_cluster: fd.LocalCluster) -> None:
    addrs = ray_cluster.listening_addresses()
    assert addrs, "no listening sockets recorded"
    bad = [a for a in addrs if not (a[0].startswith("127.") or a[0] == "::ffff:127.0.0.1"
                                    or a[0] == "::1")]
    assert not bad, f"Ray listens beyond loopback: {bad}"


def test_state_shared_across_client_processes(dist: Dist) -> None:
    """The seed's simple_client.py run twice: the variable outlives each client."""
    name = dist.name("x")
    code = f"""
        x = fd.Variable(0.0, name={name!r}, task="/job:ps/task:1")
        x.assign_add(1.0)
        print(float(x.read()))
    """
    outs = []
    for _ in range(2):
        p = _client(code, dist.cluster)
        out, err = p.communicate(timeout=40)
        assert p.returncode == 0, err[-2000:]
        outs.append(out.split()[-1])
    assert outs == ["1.0", "2.0"]


def test_client_death_mid_dequeue_loses_nothing(dist: Dist) -> None:
    name = dist.name()
    q = fd.FIFOQueue(-1, np.int64, shapes=[[]], shared_name=name, task="/job:ps/task:0")
    q.enqueue_many(np.arange(3))
    p = _client(f"""
        q = fd.FIFOQueue(-1, np.int64, shapes=[[]], shared_name={name!r}, task="/job:ps/task:0")
        q.dequeue_many(5)   # collects 3, then waits for 2 more
    """, dist.cluster)
    try:
        _wait(lambda: q.statistics().waiting_consumers == 1, 30, "the client to block")
        assert q.size() == 0  # the 3 are held by the blocked client's call
    finally:
        p.kill()
        p.communicate(timeout=10)
    t0 = time.monotonic()
    _wait(lambda: q.size() == 3, 10, "the dead client's elements to come back")
    assert time.monotonic() - t0 < 6.0
    np.testing.assert_array_equal(q.dequeue_many(3), [0, 1, 2])  # in order, once each
    assert q.statistics().waiting_consumers == 0


def test_dead_server_gives_unavailable_within_5s(dist: Dist) -> None:
    task = "/job:spare/task:1"
    q = fd.FIFOQueue(-1, np.int64, shapes=[[]], shared_name=dist.name(), task=task)
    pid = dist.cluster.servers[task].info()["pid"]
    errors: list[BaseException] = []

    def consume() -> None:
        try:
            q.dequeue(timeout=60)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    t = threading.Thread(target=consume, name="blocked-on-dying-server")
    t.start()
    _wait(lambda: q.statistics().waiting_consumers == 1, 10, "the consumer to block")
    t0 = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    t.join(10)
    blocked_s = time.monotonic() - t0
    assert errors and isinstance(errors[0], UnavailableError), errors
    assert str(errors[0]).startswith("task /job:spare/task:1 is unavailable")
    assert blocked_s < 5.0
    t1 = time.monotonic()
    with pytest.raises(UnavailableError, match=r"^task /job:spare/task:1 is unavailable"):
        q.size()
    assert time.monotonic() - t1 < 5.0
    print(f"dead server: blocked caller released after {blocked_s:.2f} s")
    _restart(dist, "spare", 1)


def test_hung_server_gives_unavailable_within_5s(dist: Dist) -> None:
    task = "/job:spare/task:2"
    q = fd.FIFOQueue(-1, np.int64, shapes=[[]], shared_name=dist.name(), task=task)
    pid = dist.cluster.servers[task].info()["pid"]
    os.kill(pid, signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        with pytest.raises(UnavailableError, match=r"^task /job:spare/task:2 is unavailable: its "
                           r"server did not answer for 3 s$"):
            q.dequeue(timeout=60)
        hung_s = time.monotonic() - t0
        assert hung_s < 5.0
    finally:
        os.kill(pid, signal.SIGKILL)  # our process: the frozen server actor
    print(f"hung server: caller released after {hung_s:.2f} s")
    _restart(dist, "spare", 2)


def _restart(dist: Dist, job: str, index: int) -> None:
    """Serve a killed task again (explicitly: servers never restart by themselves)."""
    task = f"/job:{job}/task:{index}"
    deadline = time.monotonic() + 20
    while True:
        try:
            dist.cluster.servers[task] = fd.Server(SPEC, job, index, backend="ray",
                                                   namespace=dist.cluster.namespace)
            return
        except InvalidArgumentError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def test_coordinator_stop_crosses_processes(dist: Dist) -> None:
    name = dist.name("coord")
    coord = fd.ClusterCoordinator(name, task="/job:ps/task:0", origin="/job:worker/task:0")
    stamps: list[float] = []
    coord.add_stop_callback(lambda cause: stamps.append(time.time()))
    p = _client(f"""
        import time
        c = fd.ClusterCoordinator({name!r}, task="/job:ps/task:0", origin="/job:worker/task:1")
        print(time.time(), flush=True)
        c.request_stop(KeyError("lost shard"))
        c.close()
    """, dist.cluster)
    out, err = p.communicate(timeout=40)
    assert p.returncode == 0, err[-2000:]
    assert coord.wait_for_stop(5.0)
    requested_at = float(out.split()[0])
    assert stamps[0] - requested_at < 1.0  # reaches every process within a second
    print(f"coordinator stop crossed processes in {stamps[0] - requested_at:.3f} s")
    with pytest.raises(KeyError) as info:
        coord.join(stop_grace_period_secs=5)
    assert info.value.task == "/job:worker/task:1"  # type: ignore[attr-defined]
    coord.close()


def test_server_misconfiguration_messages(dist: Dist) -> None:
    other = {"ps": ["h:1"], "extra": ["h:9"]}
    with pytest.raises(InvalidArgumentError, match=r"^no Ray node offers the resource 'feedq_task_extra_0' for task "
                             r"/job:extra/task:0"):
        fd.Server(other, "extra", 0, backend="ray", namespace=dist.cluster.namespace)


@pytest.mark.timeout(150)
@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_runs_on_the_cluster(path: Path, dist: Dist) -> None:
    proc = subprocess.run([sys.executable, str(path)], check=False, env=dist.cluster.env, cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]


def test_command_line_serves_and_stops_a_task(dist: Dist) -> None:
    """`python -m feedq.distributed serve/stop`: the production start-up path."""
    def cli(*args: str) -> list[str]:
        return [sys.executable, "-m", "feedq.distributed", *args, "--job", "spare", "--task", "0",
                "--namespace", dist.cluster.namespace]

    stop = subprocess.run(cli("stop"), check=False, env=dist.cluster.env, cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert stop.returncode == 0, stop.stderr[-2000:]
    dist.cluster.servers.pop("/job:spare/task:0", None)
    serve = subprocess.Popen(cli("serve"), env=dist.cluster.env, cwd=ROOT, text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert serve.stdout is not None
        assert serve.stdout.readline().startswith("serving /job:spare/task:0")
        q = fd.FIFOQueue(2, np.int64, shared_name=dist.name(), task="/job:spare/task:0")
        q.enqueue(5)
        assert q.dequeue() == 5
        stop = subprocess.run(cli("stop"), check=False, env=dist.cluster.env, cwd=ROOT, capture_output=True,
                              text=True, timeout=60)
        assert stop.returncode == 0, stop.stderr[-2000:]
        assert serve.wait(timeout=30) == 0  # join() returned once the server stopped
    finally:
        if serve.poll() is None:
            serve.kill()
        serve.communicate(timeout=10)
    _restart(dist, "spare", 0)


def test_client_deadline_abandons_the_call_losslessly(dist: Dist) -> None:
    """A server that does not answer in time: the client gives up after its
    timeout plus a grace period, and the host, once it runs again, takes
    nothing for the abandoned call."""
    task = "/job:spare/task:0"
    q = fd.FIFOQueue(-1, np.int64, shapes=[[]], shared_name=dist.name(), task=task)
    q.enqueue_many(np.arange(3))
    pid = dist.cluster.servers[task].info()["pid"]
    os.kill(pid, signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        with pytest.raises(DeadlineExceededError, match=r"^Timed out waiting for task "
                           r"/job:spare/task:0: no answer within the call's timeout"):
            q.dequeue_many(3, timeout=0.1)
        assert time.monotonic() - t0 < 3.0
    finally:
        os.kill(pid, signal.SIGCONT)
    _wait(lambda: q.statistics().waiting_consumers == 0 and q.size() == 3, 10,
          "the abandoned call to leave the elements in place")
    np.testing.assert_array_equal(q.dequeue_many(3, timeout=5), [0, 1, 2])
