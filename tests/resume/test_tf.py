"""Resuming ``as_tf_dataset``: tf.data cannot checkpoint a generator's Python
state, so the returned dataset carries ``state_dict`` / ``load_state_dict``
of its own (the source's position as of the batches handed to TensorFlow)."""

from __future__ import annotations

import pickle
from typing import Any

import pytest

import feedq
from feedq.errors import FailedPreconditionError, InvalidArgumentError
from tests.process._support import no_process_leaks  # noqa: F401
from tests.resume import _builds as builds

tf = pytest.importorskip("tensorflow")

pytestmark = pytest.mark.timeout(120)

SEED = 3


def tags(batches: Any) -> list[tuple[int, int, int]]:
    out = []
    for b in batches:
        w, e, i = (int(v) for v in b.numpy())
        out.append((w, e, i))
    return out


def test_process_stage_round_trip() -> None:
    expected = builds.expected(2, 1, SEED)
    with feedq.process_stage(builds.stateful_rows, 2, seed=SEED) as stage:
        ds = feedq.as_tf_dataset(stage, resumable=True)  # peeks the first batch
        it = iter(ds)
        got = tags(next(it) for _ in range(6))
        state = ds.state_dict()
        del it
    assert sum(state["source"]["received"]) == 6  # what TensorFlow took, nothing more
    with feedq.process_stage(builds.stateful_rows, 2, seed=SEED) as stage:
        ds = feedq.as_tf_dataset(stage, resumable=True)
        ds.load_state_dict(pickle.loads(pickle.dumps(state)))
        rest = tags(ds)
    assert got + rest == expected


def test_refusals() -> None:
    with feedq.process_stage(builds.stateful_rows, 2, seed=SEED) as stage:
        ahead = feedq.as_tf_dataset(stage)  # tf.data prefetches: no exact state
        with pytest.raises(FailedPreconditionError, match=r"resumable=True\)$"):
            ahead.state_dict()
    q = feedq.FIFOQueue(4, ["int64"], shapes=[[2]])
    ds = feedq.as_tf_dataset(q, batch_size=2, resumable=True)
    with pytest.raises(FailedPreconditionError, match=r"the source is a queue"):
        ds.state_dict()
    with pytest.raises(InvalidArgumentError, match=r"^not a state of as_tf_dataset\(source\)"):
        ds.load_state_dict({"format": "feedq.torch_build/1"})
