"""A process stage's for loop left early: the next loop continues the epoch."""

from __future__ import annotations

from feedq.process import process_stage
from tests.process import _builds as builds
from tests.process._support import no_process_leaks  # noqa: F401


def test_process_stage_break_keeps_the_epoch_for_the_next_loop() -> None:
    # Worker w makes 3 + w batches per epoch: 7 per epoch with 2 workers.
    with process_stage(builds.counting, 2, epochs=2) as stage:
        first = []
        for batch in stage:
            first.append(tuple(batch["tag"].tolist()))
            if len(first) == 3:
                break
        assert stage.epoch == 0
        rest = [tuple(b["tag"].tolist()) for b in stage]  # continues epoch 0
        second = [tuple(b["tag"].tolist()) for b in stage]  # then epoch 1
    epoch0 = first + rest
    assert len(epoch0) == 7 and sorted(epoch0) == sorted(
        [(w, 0, s) for w in range(2) for s in range(3 + w)])  # each batch once, none lost
    assert sorted(second) == sorted([(w, 1, s) for w in range(2) for s in range(3 + w)])
