"""feedq: TF1-style input pipelines for eager Python, NumPy and PyTorch.

Layering (DESIGN.md): errors ← queues ← readers / coordinator ← runners ←
input ← devices ← distributed ← cli. This module re-exports the public
surface; optional parts (torch, cupy, ray, tensorflow) load on first use.
"""

from __future__ import annotations

from . import errors
from ._defaults import get_default_timeout, set_default_timeout
from .queues import (
    STRING,
    FIFOQueue,
    PaddingFIFOQueue,
    PriorityQueue,
    QueueStatistics,
    RandomShuffleQueue,
    reset_shared_queues,
)

__version__ = "0.1.0"

__all__ = [
    "FIFOQueue",
    "PaddingFIFOQueue",
    "PriorityQueue",
    "QueueStatistics",
    "RandomShuffleQueue",
    "STRING",
    "errors",
    "get_default_timeout",
    "reset_shared_queues",
    "set_default_timeout",
]
