"""ClusterSpec: the jobs and tasks of a cluster (TF1's ``tf.train.ClusterSpec``).

A cluster is a set of *jobs* (``"ps"``, ``"worker"``, ...), each a list of
*tasks* named by an address string (``"machine-a.example.com:2222"``). A task
is written ``/job:<job>/task:<index>``. On Ray the address only identifies the
task (it is never dialled): each task runs as a Ray actor pinned to the node
that offers the custom resource :func:`task_resource` names.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from feedq.errors import InvalidArgumentError

__all__ = ["ClusterSpec", "TaskName", "task_resource"]

_JOB_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_\-]*$")
_TASK_RE = re.compile(r"^/job:([^/]+)/(?:replica:\d+/)?task:(\d+)(?:/.*)?$")


@dataclasses.dataclass(frozen=True, order=True)
class TaskName:
    """One task of a cluster: ``/job:<job>/task:<index>``.

    Attributes:
        job: the job name, e.g. ``"ps"``.
        index: the task index within the job.
    """

    job: str
    index: int

    def __post_init__(self) -> None:
        if not isinstance(self.job, str) or not _JOB_RE.match(self.job):
            raise InvalidArgumentError(f"invalid job name {self.job!r}")
        if isinstance(self.index, bool) or not isinstance(self.index, int) or self.index < 0:
            raise InvalidArgumentError(f"invalid task index {self.index!r} for job {self.job!r}")

    @classmethod
    def parse(cls, value: Any) -> TaskName:
        """A TaskName from ``"/job:ps/task:0"`` (device suffixes are ignored),
        a ``(job, index)`` pair, a TaskName, or a :class:`feedq.devices.DeviceSpec`
        with job and task set.

        Raises:
            InvalidArgumentError: the value names no task.
        """
        if isinstance(value, TaskName):
            return value
        if isinstance(value, tuple) and len(value) == 2:
            return cls(str(value[0]), int(value[1]))
        job = getattr(value, "job", None)
        task = getattr(value, "task", None)
        if job is not None and not isinstance(value, str):
            if task is None:
                raise InvalidArgumentError(f"device {value} names a job but no task")
            return cls(job, task)
        if isinstance(value, str):
            m = _TASK_RE.match(value.strip())
            if m:
                return cls(m.group(1), int(m.group(2)))
        raise InvalidArgumentError(
            f"{value!r} does not name a task; expected '/job:<name>/task:<index>'"
        )

    def __str__(self) -> str:
        return f"/job:{self.job}/task:{self.index}"


def task_resource(task: TaskName) -> str:
    """The Ray custom resource that marks the node running ``task``.

    Start the node with ``ray start ... --resources '{"<name>": 1}'``; the
    Server's actor asks for a small fraction of it, so it lands on that node.
    """
    return f"feedq_task_{task.job}_{task.index}"


class ClusterSpec:
    """The jobs and task addresses of a cluster (TF1 ``tf.train.ClusterSpec``).

    Usage::

        cluster = ClusterSpec({
            "ps": ["machine-a.example.com:2221"],              # /job:ps/task:0
            "worker": ["machine-a.example.com:2222",           # /job:worker/task:0
                       "machine-b.example.com:2222"],          # /job:worker/task:1
        })
        cluster.num_tasks("worker")          # 2
        cluster.task_address("worker", 1)    # "machine-b.example.com:2222"

    A job may also be a dict ``{index: address}`` (sparse jobs, as in TF1).

    Args:
        cluster: a dict ``{job: [address, ...] | {index: address}}``, a JSON
            string of that dict, or another ClusterSpec.

    Raises:
        InvalidArgumentError: an empty or malformed spec, a bad job name, or
            the same address used by two tasks (a duplicate task).
    """

    def __init__(self, cluster: ClusterSpec | Mapping[str, Any] | str) -> None:
        if isinstance(cluster, ClusterSpec):
            jobs: Mapping[str, Any] = cluster.as_dict()
        elif isinstance(cluster, str):
            try:
                jobs = json.loads(cluster)
            except json.JSONDecodeError as exc:
                raise InvalidArgumentError(f"cluster spec is not valid JSON: {exc}") from None
        else:
            jobs = cluster
        if not isinstance(jobs, Mapping) or not jobs:
            raise InvalidArgumentError(f"cluster spec must be a non-empty dict of jobs, got {jobs!r}")
        self._jobs: dict[str, dict[int, str]] = {}
        seen: dict[str, TaskName] = {}
        for job, tasks in jobs.items():
            if not isinstance(job, str) or not _JOB_RE.match(job):
                raise InvalidArgumentError(f"invalid job name {job!r}")
            if isinstance(tasks, Mapping):
                items = [(int(i), a) for i, a in tasks.items()]
            elif isinstance(tasks, Sequence) and not isinstance(tasks, str):
                items = list(enumerate(tasks))
            else:
                raise InvalidArgumentError(
                    f"job {job!r}: tasks must be a list of addresses or a dict, got {tasks!r}"
                )
            if not items:
                raise InvalidArgumentError(f"job {job!r} has no tasks")
            table: dict[int, str] = {}
            for index, address in sorted(items):
                if not isinstance(address, str) or not address:
                    raise InvalidArgumentError(
                        f"/job:{job}/task:{index}: address must be a non-empty string, got {address!r}"
                    )
                if address in seen:
                    raise InvalidArgumentError(
                        f"duplicate task address {address!r}: used by {seen[address]} "
                        f"and /job:{job}/task:{index}"
                    )
                seen[address] = TaskName(job, index)
                table[index] = address
            self._jobs[job] = table

    @classmethod
    def from_tf_config(cls, value: str | None = None) -> ClusterSpec:
        """The ``cluster`` part of ``TF_CONFIG`` (the environment variable by default).

        Raises:
            InvalidArgumentError: TF_CONFIG is unset, not JSON, or has no cluster.
        """
        config = _tf_config(value)
        if "cluster" not in config:
            raise InvalidArgumentError("TF_CONFIG has no 'cluster' entry")
        return cls(config["cluster"])

    @property
    def jobs(self) -> list[str]:
        """The job names, sorted."""
        return sorted(self._jobs)

    def num_tasks(self, job_name: str) -> int:
        """Number of tasks in ``job_name``.

        Raises:
            InvalidArgumentError: unknown job.
        """
        return len(self._job(job_name))

    def task_indices(self, job_name: str) -> list[int]:
        """The task indices of ``job_name``, sorted."""
        return sorted(self._job(job_name))

    def task_address(self, job_name: str, task_index: int) -> str:
        """The address of one task.

        Raises:
            InvalidArgumentError: unknown job or task.
        """
        table = self._job(job_name)
        if task_index not in table:
            raise InvalidArgumentError(
                f"no task {task_index} in job {job_name!r} (tasks: {sorted(table)})"
            )
        return table[task_index]

    def job_tasks(self, job_name: str) -> list[str]:
        """The addresses of ``job_name``'s tasks in index order."""
        table = self._job(job_name)
        return [table[i] for i in sorted(table)]

    def tasks(self) -> Iterator[TaskName]:
        """Every task of the cluster, job by job in name order."""
        for job in self.jobs:
            for index in sorted(self._jobs[job]):
                yield TaskName(job, index)

    def check_task(self, task: TaskName | str) -> TaskName:
        """Return ``task`` parsed, after checking that the cluster has it.

        Raises:
            InvalidArgumentError: unknown job or task index.
        """
        name = TaskName.parse(task)
        self.task_address(name.job, name.index)
        return name

    def as_dict(self) -> dict[str, list[str] | dict[int, str]]:
        """The spec as a dict: lists for dense jobs, dicts for sparse ones."""
        out: dict[str, list[str] | dict[int, str]] = {}
        for job in self.jobs:
            table = self._jobs[job]
            if sorted(table) == list(range(len(table))):
                out[job] = [table[i] for i in range(len(table))]
            else:
                out[job] = dict(sorted(table.items()))
        return out

    def to_json(self) -> str:
        """The spec as JSON (sparse job keys become strings)."""
        return json.dumps(self.as_dict(), sort_keys=True)

    def _job(self, job_name: str) -> dict[int, str]:
        if job_name not in self._jobs:
            raise InvalidArgumentError(f"no job {job_name!r} in the cluster (jobs: {self.jobs})")
        return self._jobs[job_name]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ClusterSpec) and self._jobs == other._jobs

    def __hash__(self) -> int:
        return hash(self.to_json())

    def __repr__(self) -> str:
        return f"ClusterSpec({self.as_dict()!r})"


def _tf_config(value: str | None) -> dict[str, Any]:
    text = os.environ.get("TF_CONFIG") if value is None else value
    if not text:
        raise InvalidArgumentError("TF_CONFIG is not set")
    try:
        config = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidArgumentError(f"TF_CONFIG is not valid JSON: {exc}") from None
    if not isinstance(config, dict):
        raise InvalidArgumentError(f"TF_CONFIG must be a JSON object, got {config!r}")
    return config
