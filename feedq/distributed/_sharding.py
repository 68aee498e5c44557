"""Input sharding for data-parallel jobs (torchrun or TF_CONFIG launched).

Each worker reads a disjoint part of the input so that every record is read
by exactly one worker per epoch (STYLE 7: sharding is a small explicit
stage, and a multi-worker run without enough files fails loudly).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from feedq.errors import InvalidArgumentError

__all__ = ["FileShard", "WorkerInfo", "shard_files", "shard_records", "worker_info"]

T = TypeVar("T")


@dataclass(frozen=True)
class WorkerInfo:
    """Which worker this process is.

    Attributes:
        rank: global worker index, ``0 <= rank < world_size``.
        world_size: number of workers.
        local_rank: index on this machine (torchrun's LOCAL_RANK; else rank).
        source: ``"torchrun"``, ``"TF_CONFIG"`` or ``"single"``.
    """

    rank: int
    world_size: int
    local_rank: int = 0
    source: str = "single"

    def __post_init__(self) -> None:
        if self.world_size < 1 or not 0 <= self.rank < self.world_size:
            raise InvalidArgumentError(
                f"invalid worker: rank {self.rank} of world size {self.world_size}"
            )


def worker_info(env: Mapping[str, str] | None = None) -> WorkerInfo:
    """This process's worker rank from torchrun or TF_CONFIG variables.

    torchrun sets ``RANK``, ``WORLD_SIZE`` and ``LOCAL_RANK``. In TF_CONFIG
    the workers are the ``chief`` task (if any) followed by the ``worker``
    tasks; ``ps`` and ``evaluator`` tasks are not workers. Without either,
    a single worker.

    Raises:
        InvalidArgumentError: malformed variables, or a TF_CONFIG task that
            is not a worker.
    """
    env = os.environ if env is None else env
    if "RANK" in env or "WORLD_SIZE" in env:
        try:
            rank, world = int(env.get("RANK", "0")), int(env.get("WORLD_SIZE", "1"))
            local = int(env.get("LOCAL_RANK", str(rank)))
        except ValueError:
            raise InvalidArgumentError(
                f"RANK/WORLD_SIZE/LOCAL_RANK must be integers, got {env.get('RANK')!r}/"
                f"{env.get('WORLD_SIZE')!r}/{env.get('LOCAL_RANK')!r}"
            ) from None
        return WorkerInfo(rank, world, local, "torchrun")
    text = env.get("TF_CONFIG")
    if text:
        try:
            config = json.loads(text)
            cluster, task = config["cluster"], config["task"]
            kind, index = task["type"], int(task["index"])
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise InvalidArgumentError(f"TF_CONFIG lacks cluster/task type/index: {exc}") from None
        workers = [("chief", i) for i in range(len(cluster.get("chief", [])))]
        workers += [("worker", i) for i in range(len(cluster.get("worker", [])))]
        if (kind, index) not in workers:
            raise InvalidArgumentError(
                f"TF_CONFIG task {kind}:{index} is not a worker (workers are chief and worker tasks)"
            )
        rank = workers.index((kind, index))
        return WorkerInfo(rank, len(workers), rank, "TF_CONFIG")
    return WorkerInfo(0, 1, 0, "single")


@dataclass(frozen=True)
class FileShard:
    """A file and which of its records this worker reads: ``i % count == index``."""

    path: str
    index: int
    count: int


def shard_files(files: Sequence[str], rank: int | None = None, world_size: int | None = None,
                *, split_records: bool = False) -> list[str] | list[FileShard]:
    """The files this worker reads: ``files[rank::world_size]``.

    The list remembers its rank and world size: a resumable pipeline over it
    saves them in its state, so that :func:`feedq.reshard_states` refuses
    states given in the wrong rank order.

    Args:
        files: the whole file list, in the same order on every worker.
        rank, world_size: this worker; ``None`` reads :func:`worker_info`.
        split_records: when there are fewer files than workers, give every
            worker every file with a record split (a list of
            :class:`FileShard`) instead of failing. Apply it with
            :func:`shard_records`.

    Raises:
        InvalidArgumentError: fewer files than workers without
            ``split_records`` (some workers would read nothing, and a
            silent imbalance is worse than an error), or a bad rank.
    """
    if rank is None or world_size is None:
        info = worker_info()
        rank = info.rank if rank is None else rank
        world_size = info.world_size if world_size is None else world_size
    WorkerInfo(rank, world_size)  # validates
    files = list(files)
    if len(files) < world_size:
        if not split_records:
            raise InvalidArgumentError(
                f"{len(files)} files for {world_size} workers: some workers would read nothing; "
                "pass split_records=True to split each file's records between workers, "
                "or provide at least as many files as workers"
            )
        return [FileShard(f, rank, world_size) for f in files]
    return _FileList(files[rank::world_size], rank, world_size)


class _FileList(list[str]):
    """``files[rank::world_size]`` that remembers which shard it is: a
    resumable pipeline's state records it (``"shard"``), and
    :func:`feedq.reshard_states` checks the states' rank order by it."""

    def __init__(self, files: list[str], rank: int, world_size: int) -> None:
        super().__init__(files)
        self.feedq_shard = {"rank": rank, "world": world_size}


def shard_records(records: Iterable[T], index: int, count: int) -> Iterator[T]:
    """Keep records ``i`` with ``i % count == index`` (a record-level shard)."""
    if count < 1 or not 0 <= index < count:
        raise InvalidArgumentError(f"invalid record shard {index} of {count}")
    for i, record in enumerate(records):
        if i % count == index:
            yield record


