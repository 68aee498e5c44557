"""Queues: FIFOQueue, RandomShuffleQueue, PaddingFIFOQueue, PriorityQueue,
the ConditionalAccumulator (spec A1–A4), and CancelToken.

See ``docs/queue-api.md`` for the contract and ``docs/tf1-compat.md``, rules
Q1–Q43 and T1–T4, for the behaviour they follow.

Modules, one idea each: ``_spec`` (element specs, value conversion),
``_cancel`` (CancelToken, how a call waits), ``_engine`` (pending attempts,
flush, waits, withdrawal), ``_queue`` (QueueBase: the public API),
one module per kind's storage (``_fifo``, ``_padding``, ``_shuffle``,
``_priority``; ``_refs``: dropping an object column's references),
``_select`` (``from_list``), ``_registry`` (shared resources by name),
``_accumulator``.
"""

from __future__ import annotations

from ._accumulator import (
    AccumulatorStatistics,
    ConditionalAccumulator,
    reset_shared_accumulators,
)
from ._cancel import CancelToken
from ._engine import QueueState
from ._fifo import FIFOQueue
from ._padding import PaddingFIFOQueue
from ._priority import PriorityQueue
from ._queue import QueueBase, QueueStatistics
from ._registry import ResourceManager, reset_shared_queues
from ._select import SelectedQueue
from ._shuffle import RandomShuffleQueue
from ._spec import STRING, as_dtype

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
