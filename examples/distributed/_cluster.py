"""Shared by the distributed examples: join the cluster the environment names
(the test suite passes one), or start a small simulated one on this machine.

Not an example itself (the leading underscore keeps it out of the example runs).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import feedq.distributed as fd

#: The seed's cluster: two ps tasks and two workers.
SPEC = {
    "ps": ["machine-a.example.com:2221", "machine-b.example.com:2221"],
    "worker": ["machine-a.example.com:2222", "machine-b.example.com:2222"],
}


@contextmanager
def cluster() -> Iterator[tuple[fd.Session, dict[str, str]]]:
    """Yields (session, env for child processes)."""
    if os.environ.get("FEEDQ_CLUSTER") and os.environ.get("RAY_ADDRESS"):
        session = fd.connect()  # FEEDQ_CLUSTER, RAY_ADDRESS, FEEDQ_NAMESPACE
        try:
            yield session, dict(os.environ)
        finally:
            fd.disconnect()
        return
    # The README/example smoke test (FEEDQ_EXAMPLE_QUICK) runs every example
    # standalone: the in-process backend keeps that to a second each; the
    # Ray run of the same examples is tests/distributed/test_ray.py's.
    backend = "local" if os.environ.get("FEEDQ_EXAMPLE_QUICK") else None
    with fd.LocalCluster(SPEC, backend=backend) as lc:
        assert lc.session is not None
        yield lc.session, lc.env


def run_replicas(script: str, target: Callable[[int], None], n: int, env: dict[str, str],
                 backend: str) -> None:
    """Run ``n`` replicas: processes (``python script --replica i``) on Ray;
    threads on the local backend, where servers live in this process."""
    if backend == "ray":
        procs = [subprocess.Popen([sys.executable, script, "--replica", str(i)], env=env)
                 for i in range(n)]
        codes = [p.wait(timeout=120) for p in procs]
        if any(codes):
            raise SystemExit(f"a replica failed: exit codes {codes}")
        return
    threads = [threading.Thread(target=target, args=(i,), name=f"replica-{i}") for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)


def replica_index() -> int | None:
    """The replica index when this script runs as a replica process."""
    if len(sys.argv) == 3 and sys.argv[1] == "--replica":
        return int(sys.argv[2])
    return None
