"""``feedq cluster`` (also ``python -m feedq.distributed``, which runs this
module): run or stop one task's Server from a shell.

Production start-up, one machine per task (Ray started first on each)::

    # machine A (head):
    ray start --head --node-ip-address=10.0.0.1 \\
        --resources "$(feedq cluster resources --job ps --task 0)"
    feedq cluster serve --job ps --task 0 --address 10.0.0.1:6379 \\
        --cluster '{"ps": ["10.0.0.1:2221"], "worker": ["10.0.0.2:2222"]}'
    # machine B:
    ray start --address 10.0.0.1:6379 \\
        --resources "$(feedq cluster resources --job worker --task 0)"

``serve`` blocks (``Server.join``) until the server is stopped, e.g. by
``feedq cluster stop --job ps --task 0 ...`` from anywhere. The cluster spec
may also come from ``FEEDQ_CLUSTER`` or ``TF_CONFIG``. Errors follow the
``feedq`` command's contract: one line, ``feedq: error: ...``, exit status 1
(``--debug`` for a traceback).
"""

from __future__ import annotations

import json
import os
import sys

import click

from feedq.cli._util import CONTEXT, guard, set_debug
from feedq.distributed import ClusterSpec, TaskName, task_resource

__all__ = ["cluster", "main"]

_PROG = "python -m feedq.distributed"


def _spec(cluster_json: str | None) -> ClusterSpec:
    if cluster_json:
        return ClusterSpec(cluster_json)
    if os.environ.get("FEEDQ_CLUSTER"):
        return ClusterSpec(os.environ["FEEDQ_CLUSTER"])
    return ClusterSpec.from_tf_config()


_job = click.option("--job", required=True, help="The task's job name, e.g. ps or worker.")
_task = click.option("--task", type=click.IntRange(min=0), default=0, show_default=True,
                     help="The task's index in its job.")
_cluster = click.option("--cluster", "cluster_json", metavar="JSON", default=None,
                        help='Cluster spec JSON, e.g. \'{"ps": ["h0:2221"], "worker": ["h1:2222"]}\' '
                             "(default: FEEDQ_CLUSTER, then TF_CONFIG).")
_address = click.option("--address", default=None, metavar="HOST:PORT",
                        help="Ray cluster address (default: RAY_ADDRESS).")
_namespace = click.option("--namespace", default="feedq", show_default=True,
                          help="Ray namespace the servers live in.")


@click.group(context_settings=CONTEXT, epilog="""\b
Examples:
  feedq cluster resources --job ps --task 0
  feedq cluster serve --job ps --task 0 --address 10.0.0.1:6379 \\
      --cluster '{"ps": ["10.0.0.1:2221"], "worker": ["10.0.0.2:2222"]}'
  feedq cluster stop --job ps --task 0 --address 10.0.0.1:6379 --cluster '...'
""")
@click.option("--debug", is_flag=True, help="Show full tracebacks on errors.")
def cluster(debug: bool) -> None:
    """Run, stop or describe a cluster task's server (on Ray).

    Start Ray on each machine with the task's resource (`resources`), then
    one `serve` per task; `stop` ends a server from anywhere.
    """
    set_debug(debug)


@cluster.command(context_settings=CONTEXT, epilog="""\b
Examples:
  feedq cluster serve --job ps --task 0 --address 10.0.0.1:6379 \\
      --cluster '{"ps": ["10.0.0.1:2221"], "worker": ["10.0.0.2:2222"]}'
  TF_CONFIG='{"cluster": {...}}' feedq cluster serve --job worker --task 1
""")
@_job
@_task
@_cluster
@_address
@_namespace
@click.option("--operation-timeout", type=click.FloatRange(min=0, min_open=True), default=None,
              metavar="SECONDS", help="Cluster default timeout for calls that pass none (default: none).")
def serve(job: str, task: int, cluster_json: str | None, address: str | None, namespace: str,
          operation_timeout: float | None) -> None:
    """Run a task's server until it is stopped (Server.join)."""
    def body() -> None:
        from feedq.distributed import Server

        server = Server(_spec(cluster_json), job, task, address=address, namespace=namespace,
                        operation_timeout=operation_timeout)
        click.echo(f"serving {server.task} ({server.target})")
        sys.stdout.flush()
        server.join()

    guard(body)


@cluster.command(context_settings=CONTEXT, epilog="""\b
Examples:
  feedq cluster stop --job ps --task 0 --address 10.0.0.1:6379 \\
      --cluster '{"ps": ["10.0.0.1:2221"], "worker": ["10.0.0.2:2222"]}'
""")
@_job
@_task
@_cluster
@_address
@_namespace
def stop(job: str, task: int, cluster_json: str | None, address: str | None, namespace: str) -> None:
    """Stop a task's server (a `serve` then returns)."""
    def body() -> None:
        from feedq.distributed import connect, stop_server

        session = connect(_spec(cluster_json), address=address, namespace=namespace)
        stop_server(TaskName(job, task), session)

    guard(body)


@cluster.command(context_settings=CONTEXT, epilog="""\b
Examples:
  feedq cluster resources --job worker --task 1     # {"feedq_task_worker_1": 1}
  ray start --head --resources "$(feedq cluster resources --job ps --task 0)"
""")
@_job
@_task
def resources(job: str, task: int) -> None:
    """Print the Ray --resources JSON of a task's node."""
    def body() -> None:
        click.echo(json.dumps({task_resource(TaskName(job, task)): 1}))

    guard(body)


def main(argv: list[str] | None = None) -> int:
    """Run the command (``python -m feedq.distributed``); returns the exit status."""
    try:
        cluster.main(args=argv, prog_name=_PROG)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
