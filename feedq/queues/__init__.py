"""Queues: FIFOQueue, RandomShuffleQueue, PaddingFIFOQueue, PriorityQueue,
and the ConditionalAccumulator (spec A1–A4).

See ``docs/queue-api.md`` for the contract and ``docs/tf1-compat.md``, rules
Q1–Q43 and T1–T4, for the behaviour they follow.
"""

from __future__ import annotations

from ._accumulator import (
    AccumulatorStatistics,
    ConditionalAccumulator,
    reset_shared_accumulators,
)
from ._base import QueueBase, QueueState, QueueStatistics, reset_shared_queues
from ._kinds import FIFOQueue, PaddingFIFOQueue, PriorityQueue, RandomShuffleQueue
from ._spec import STRING, as_dtype

__all__ = [
    "AccumulatorStatistics",
    "ConditionalAccumulator",
    "FIFOQueue",
    "PaddingFIFOQueue",
    "PriorityQueue",
    "QueueBase",
    "QueueState",
    "QueueStatistics",
    "RandomShuffleQueue",
    "STRING",
    "as_dtype",
    "reset_shared_accumulators",
    "reset_shared_queues",
]
