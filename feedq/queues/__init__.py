"""Queues: FIFOQueue, RandomShuffleQueue, PaddingFIFOQueue, PriorityQueue,
the ConditionalAccumulator (spec A1–A4), and CancelToken.

See ``docs/queue-api.md`` for the contract and ``docs/tf1-compat.md``, rules
Q1–Q43 and T1–T4, for the behaviour they follow.

Modules, one idea each: ``_spec`` (element specs, value conversion),
``_cancel`` (CancelToken, how a call waits), ``_engine`` (a queue's engine:
its lock, lines, close state and counters; pending attempts, flush, waits,
withdrawal), ``_queue`` (QueueBase: the public API, the one put path and
the one take path, the storage hooks' contract),
one module per kind's storage (``_fifo``, ``_padding``, ``_shuffle``,
``_priority``; ``_refs``: dropping an object column's references),
``_select`` (``from_list``), ``_registry`` (shared resources by name),
``_accumulator``.
"""

from __future__ import annotations

from feedq.queues._accumulator import (
    AccumulatorStatistics,
    ConditionalAccumulator,
    reset_shared_accumulators,
)
from feedq.queues._cancel import CancelToken
from feedq.queues._engine import QueueState
from feedq.queues._fifo import FIFOQueue
from feedq.queues._padding import PaddingFIFOQueue
from feedq.queues._priority import PriorityQueue
from feedq.queues._queue import QueueBase, QueueStatistics
from feedq.queues._registry import ResourceManager, reset_shared_queues
from feedq.queues._select import SelectedQueue
from feedq.queues._shuffle import RandomShuffleQueue
from feedq.queues._spec import STRING, as_dtype

# Plain sorted order (tests/test_public_api.py), not isort's.
__all__ = [  # noqa: RUF022
    "AccumulatorStatistics",
    "CancelToken",
    "ConditionalAccumulator",
    "FIFOQueue",
    "PaddingFIFOQueue",
    "PriorityQueue",
    "QueueBase",
    "QueueState",
    "QueueStatistics",
    "RandomShuffleQueue",
    "ResourceManager",
    "STRING",
    "SelectedQueue",
    "as_dtype",
    "reset_shared_accumulators",
    "reset_shared_queues",
]

# Public classes report the package they are documented in.
for _cls in (
    AccumulatorStatistics,
    CancelToken,
    ConditionalAccumulator,
    FIFOQueue,
    PaddingFIFOQueue,
    PriorityQueue,
    QueueBase,
    QueueState,
    QueueStatistics,
    RandomShuffleQueue,
    ResourceManager,
    SelectedQueue,
):
    _cls.__module__ = __name__
del _cls
