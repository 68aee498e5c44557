"""The seams of resumption: the pipeline's registry (``feedq/_resume/registry.py``),
the current pipeline on the ground floor (``feedq/_core/scope.py``) and the
readers' reporting interface (``feedq/_core/positions.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

import feedq
from feedq._core import positions as reader_positions
from feedq._core import scope
from feedq._resume.registry import Registry
from feedq.errors import InvalidArgumentError
from tests.resume import _support as rs


def test_current_pipeline_is_the_same_object_below_and_above() -> None:
    assert scope.current_pipeline() is None and feedq.current_pipeline() is None
    pipe = feedq.Pipeline()
    with pipe.as_default():
        assert scope.current_pipeline() is pipe
        assert feedq.current_pipeline() is pipe
        with feedq.Pipeline() as inner:  # the innermost is current
            assert scope.current_pipeline() is inner
            assert feedq.current_pipeline() is inner
        assert scope.current_pipeline() is pipe
    assert scope.current_pipeline() is None


def test_the_parts_register_as_they_are_built(tmp_path: Path) -> None:
    data = rs.write_data(tmp_path, "memory")
    ids, x = rs._memory_arrays(data["total"])
    with feedq.Pipeline(resumable=True) as pipe:
        registry = pipe.resumption
        assert isinstance(registry, Registry)
        assert registry.producer is None and registry.batcher is None
        prod = feedq.slice_input_producer([ids, x], num_epochs=1, seed=3)
        assert registry.producer is not None and registry.batcher is None
        stage = feedq.batch(prod, 4)
        assert registry.batcher is stage._resumption
        assert registry.batcher.producer is registry.producer
        with pytest.raises(InvalidArgumentError, match="^a resumable pipeline has one batcher "):
            feedq.batch(prod, 4)


def test_the_pending_state_is_taken_by_the_batcher(tmp_path: Path) -> None:
    data = rs.write_data(tmp_path, "memory")
    ids, x = rs._memory_arrays(data["total"])
    with feedq.Pipeline(resumable=True) as pipe:
        rs.build(pipe, data, "fifo", 1)
        state = pipe.state_dict()
    with feedq.Pipeline(state=state) as pipe:
        assert pipe.resumption.pending is state
        prod = feedq.slice_input_producer([ids, x], num_epochs=1, seed=3)
        assert pipe.resumption.pending is state  # the producer restores it, the batcher takes it
        feedq.batch(prod, rs.BATCH, allow_smaller_final_batch=True)
        assert pipe.resumption.pending is None
        assert sum(len(b[0]) for b in pipe) == data["total"]


def test_no_unit_is_claimed_outside_a_batchers_evaluation() -> None:
    """Readers report nothing unless a resumable batcher's runner is
    evaluating its source in their thread (the consumer's thread is not)."""
    assert reader_positions.claim_unit() is None
    with feedq.Pipeline(resumable=True):
        feedq.string_input_producer(["a", "b"], num_epochs=1)
        assert reader_positions.claim_unit() is None
