"""``python -m feedq.distributed``: run or stop one task's Server from a shell.

Production start-up, one machine per task (Ray started first on each)::

    # machine A (head):
    ray start --head --node-ip-address=10.0.0.1 \\
        --resources "$(python -m feedq.distributed resources --job ps --task 0)"
    python -m feedq.distributed serve --job ps --task 0 --address 10.0.0.1:6379 \\
        --cluster '{"ps": ["10.0.0.1:2221"], "worker": ["10.0.0.2:2222"]}'
    # machine B:
    ray start --address 10.0.0.1:6379 \\
        --resources "$(python -m feedq.distributed resources --job worker --task 0)"

``serve`` blocks (``Server.join``) until the server is stopped, e.g. by
``python -m feedq.distributed stop --job ps --task 0 ...`` from anywhere.
The cluster spec may also come from ``FEEDQ_CLUSTER`` or ``TF_CONFIG``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from ..errors import FeedqError
from ._cluster import ClusterSpec, TaskName, task_resource

__all__ = ["main"]


def _cluster(args: argparse.Namespace) -> ClusterSpec:
    if args.cluster:
        return ClusterSpec(args.cluster)
    if os.environ.get("FEEDQ_CLUSTER"):
        return ClusterSpec(os.environ["FEEDQ_CLUSTER"])
    return ClusterSpec.from_tf_config()


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status."""
    parser = argparse.ArgumentParser(prog="python -m feedq.distributed",
                                     description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, text in (("serve", "run a task's server until it is stopped"),
                       ("stop", "stop a task's server"),
                       ("resources", "print the Ray --resources JSON of a task's node")):
        p = sub.add_parser(name, help=text)
        p.add_argument("--job", required=True)
        p.add_argument("--task", type=int, default=0)
        if name != "resources":
            p.add_argument("--cluster", help="cluster spec JSON (default: FEEDQ_CLUSTER, TF_CONFIG)")
            p.add_argument("--address", help="Ray cluster address (default: RAY_ADDRESS)")
            p.add_argument("--namespace", default="feedq")
        if name == "serve":
            p.add_argument("--operation-timeout", type=float, default=None,
                           help="cluster default timeout in seconds for calls that give none")
    args = parser.parse_args(argv)
    try:
        if args.command == "resources":
            print(json.dumps({task_resource(TaskName(args.job, args.task)): 1}))
            return 0
        from ._server import Server, stop_server
        from ._session import connect

        cluster = _cluster(args)
        if args.command == "stop":
            session = connect(cluster, address=args.address, namespace=args.namespace)
            stop_server(TaskName(args.job, args.task), session)
            return 0
        server = Server(cluster, args.job, args.task, address=args.address,
                        namespace=args.namespace, operation_timeout=args.operation_timeout)
        print(f"serving {server.task} ({server.target})", flush=True)
        server.join()
        return 0
    except (FeedqError, ImportError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
