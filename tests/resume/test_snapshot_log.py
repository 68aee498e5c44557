"""The shuffle buffer's snapshots rebuilt from checkpoints and a replay log
(``feedq/_resume/snapshot_log.py``) are the ones a full copy after every draw holds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import feedq
from feedq._resume import snapshot_log as _snapshot_log
from feedq.readers import TextLineReader
from tests.resume import _support as rs


def _snapshots(build: Any, every: int, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """(buffer, rng, fed, last) as of every ticket of a whole run, with a
    checkpoint every ``every`` draws."""
    monkeypatch.setattr(_snapshot_log, "CHECKPOINT_EVERY", every)
    out = []
    with feedq.Pipeline(resumable=True) as pipe:
        stage = build(pipe)
        for _ in pipe:
            snap = stage._resumption.ledger.snapshot(stage.taken)
            out.append((snap.buffer.copy(), snap.rng, snap.fed, snap.last))
    return out


def _same(a: list[Any], b: list[Any]) -> None:
    assert len(a) == len(b) > 0
    for (buf_a, rng_a, fed_a, last_a), (buf_b, rng_b, fed_b, last_b) in zip(a, b):
        np.testing.assert_array_equal(buf_a, buf_b)
        assert (rng_a, fed_a, last_a) == (rng_b, fed_b, last_b)


@pytest.mark.parametrize("fmt", ["memory", "csv"])
def test_replayed_snapshots_equal_copies(tmp_path: Path, fmt: str,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Every draw's snapshot (X12 exact mode), through the final draining of
    the buffer after the input ends, as a copy (a checkpoint at every draw)
    and as rebuilt from a checkpoint every 7 draws."""
    data = rs.write_data(tmp_path, fmt, files=3)

    def build(pipe: feedq.Pipeline) -> feedq.Stage:
        return rs.build(pipe, data, "exact", 2)

    copies = _snapshots(build, 1, monkeypatch)
    _same(copies, _snapshots(build, 7, monkeypatch))
    assert any(buf.shape[0] == 0 for buf, _, _, _ in copies)  # drained to the end
    assert len({str(rng) for _, rng, _, _ in copies}) == len(copies)  # every draw moved it


def test_replayed_snapshots_of_single_elements(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """A source giving one element per evaluation (no enqueue_many)."""
    data = rs.write_data(tmp_path, "csv", files=2)

    def build(pipe: feedq.Pipeline) -> feedq.Stage:
        files = feedq.string_input_producer(data["paths"], num_epochs=1, seed=11)
        reader = pipe.closing(TextLineReader())
        return feedq.shuffle_batch(lambda: reader.read(files)[1], rs.BATCH, rs.CAPACITY,
                                   rs.MIN_AFTER, seed=7, dtypes=[feedq.STRING], shapes=[[]],
                                   allow_smaller_final_batch=True)

    _same(_snapshots(build, 1, monkeypatch), _snapshots(build, 5, monkeypatch))


def test_old_snapshots_are_dropped_recent_ones_rebuilt() -> None:
    """Snapshots are kept for the last SNAPSHOT_WINDOW tickets: older ones
    are refused with a clear error, every kept one is rebuilt (and is the
    buffer as of its ticket: the rows fed minus the rows taken)."""
    from feedq._resume.ledger import SNAPSHOT_WINDOW
    from feedq.errors import InvalidArgumentError

    with feedq.Pipeline(resumable=True) as pipe:
        prod = feedq.slice_input_producer([np.arange(20_000)], num_epochs=1, seed=1)
        stage = feedq.shuffle_batch(prod, 8, capacity=100, min_after_dequeue=50, seed=2)
        it = iter(pipe)
        for _ in range(SNAPSHOT_WINDOW + 200):
            next(it)
        taken = stage.taken
        ledger = stage._resumption.ledger
        ledger.check_upto(None)  # applies what was filed, prunes
        with pytest.raises(InvalidArgumentError, match="snapshot for it is gone"):
            ledger.snapshot(taken - SNAPSHOT_WINDOW - 40)
        for upto in range(taken - SNAPSHOT_WINDOW, taken + 1):
            snap = ledger.snapshot(upto)
            assert snap.buffer.shape[0] == snap.fed - 8 * upto
            assert np.unique(snap.buffer).shape[0] == snap.buffer.shape[0]
