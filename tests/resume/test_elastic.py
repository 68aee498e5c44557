"""Elastic re-sharding (``feedq.reshard_states``) when the old ranks are in
different epochs, and its refusals.

Ranks that take the same number of steps over shards of unequal sizes (or
different numbers of steps) are in different epochs when they save. The
re-sharded work brings every old rank to the newest epoch any of them had
begun; new ranks then continue from there. Counted over old and new ranks,
every record comes exactly ``num_epochs`` times; with ``num_epochs=None``,
exactly ``E + k`` times once every new rank has done its work list and ``k``
whole epochs of its own files (FIFO batching keeps that order exact).
"""

from __future__ import annotations

import math
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import feedq
from feedq._resume import positions
from feedq._resume.ledger import unpack
from feedq.errors import InvalidArgumentError
from feedq.readers import TextLineReader, decode_csv

BATCH = 8


def _write(tmp_path: Path, sizes: list[int]) -> tuple[list[str], dict[str, int]]:
    """CSV files of records with ids 0..sum(sizes)-1; paths and sizes by path."""
    paths, size_of, rid = [], {}, 0
    for f, n in enumerate(sizes):
        path = tmp_path / f"f{f:02d}.csv"
        path.write_text("".join(f"{i}\n" for i in range(rid, rid + n)))
        rid += n
        paths.append(str(path))
        size_of[str(path)] = n
    return paths, size_of


def _run(paths: list[str], state: dict[str, Any] | None, epochs: int | None, *,
         batches: int | None = None, records: int | None = None, fifo: bool = False,
         seed: int = 5) -> tuple[np.ndarray, dict[str, Any]]:
    """One rank: the ids it delivered (``batches`` batches, or the first
    ``records`` records, or everything) and its state after them."""
    with feedq.Pipeline(resumable=True, state=state) as pipe:
        files = feedq.string_input_producer(paths, num_epochs=epochs, seed=seed)
        reader = pipe.closing(TextLineReader())

        def read() -> list[Any]:
            (i,) = decode_csv(reader.read_block(files, 25), record_defaults=[[0]])
            return [i]

        kw: dict[str, Any] = dict(enqueue_many=True, dtypes=[np.int32], shapes=[[]],
                                  allow_smaller_final_batch=True)
        if fifo:
            feedq.batch(read, BATCH, capacity=40, **kw)
        else:
            feedq.shuffle_batch(read, BATCH, capacity=40, min_after_dequeue=20, seed=1, **kw)
        got: list[np.ndarray] = []
        count = 0
        for batch in pipe:
            got.append(np.asarray(batch[0] if isinstance(batch, list) else batch).copy())
            count += got[-1].shape[0]
            if (batches is not None and len(got) == batches) or (
                records is not None and count >= records
            ):
                break
        state = pipe.state_dict()
    ids = np.concatenate(got) if got else np.zeros(0, dtype=np.int32)
    return (ids if records is None else ids[:records]), pickle.loads(pickle.dumps(state))


def _begun(state: dict[str, Any]) -> int:
    """Epochs an old rank's producer had begun (what its state says)."""
    return math.ceil(int(state["producer"]["next"]) / len(state["inputs"]))


def _owed(state: dict[str, Any], size_of: dict[str, int]) -> int:
    """Records of a re-sharded state's work list (its files less their skips)."""
    units = unpack(state["units"])
    assert (units >= positions.WORKLIST_BASE).all()
    skipped = unpack(state["skips"]["ranges"]).reshape(-1, 2)
    return sum(size_of[f] for f in state["worklist"]) - int((skipped[:, 1] - skipped[:, 0]).sum())


def _counts(delivered: list[np.ndarray], total: int) -> np.ndarray:
    ids = np.concatenate(delivered)
    assert ids.min() >= 0 and ids.max() < total
    return np.bincount(ids, minlength=total)


# Old ranks stop after these many batches (None: run to the end), so that
# they save in different epochs; sizes give shards of unequal sizes. A rank
# reads ahead at most ~65 records (the buffer's 40, a block of 25) past what
# it delivered: the stops keep the epochs begun clear of that margin.
SIZES = [60, 50, 70, 40, 55, 35, 65]
CASES = [
    # (old, new, num_epochs, batches per old rank, epochs begun per old rank)
    (2, 3, 1, (3, None), (1, 1)),
    (3, 2, 1, (None, 2, 9), (1, 1, 1)),
    (2, 3, 2, (3, 30), (1, 2)),
    (3, 2, 2, (1, None, 14), (1, 2, 2)),
    (2, 3, 3, (3, 18), (1, 2)),
    (3, 2, 3, (4, 40, 15), (1, 3, 2)),
]


@pytest.mark.parametrize(("old", "new", "epochs", "stops", "begun"), CASES)
def test_ranks_in_different_epochs_every_record_num_epochs_times(
    tmp_path: Path, old: int, new: int, epochs: int, stops: tuple[int | None, ...],
    begun: tuple[int, ...],
) -> None:
    paths, _ = _write(tmp_path, SIZES)
    delivered, states = [], []
    for r in range(old):
        got, state = _run(paths[r::old], None, epochs, batches=stops[r])
        delivered.append(got)
        states.append(state)
    assert tuple(_begun(s) for s in states) == begun  # the ranks are where the case says
    resharded = feedq.reshard_states(states, new, files=paths)
    assert [s["producer"]["epoch"] for s in resharded] == [max(begun)] * new
    for r in range(new):
        got, _ = _run(paths[r::new], resharded[r], epochs)
        delivered.append(got)
    counts = _counts(delivered, sum(SIZES))
    np.testing.assert_array_equal(counts, np.full(sum(SIZES), epochs))


@pytest.mark.parametrize(("old", "new", "stops"), [(2, 3, (3, 40)), (3, 2, (40, 2, 11))])
def test_unbounded_epochs_exact_counts(tmp_path: Path, old: int, new: int,
                                       stops: tuple[int, ...]) -> None:
    """num_epochs=None: once new rank r has delivered its work list and k
    whole epochs of its own files, every record came exactly E + k times,
    E being the newest epoch boundary any old rank had reached."""
    paths, size_of = _write(tmp_path, SIZES)
    delivered, states = [], []
    for r in range(old):
        got, state = _run(paths[r::old], None, None, batches=stops[r], fifo=True)
        delivered.append(got)
        states.append(state)
    begun = [_begun(s) for s in states]
    assert len(set(begun)) > 1  # the old ranks are in different epochs
    resharded = feedq.reshard_states(states, new)
    boundary = max(begun)
    k = 2
    for r in range(new):
        assert resharded[r]["producer"]["epoch"] == boundary
        mine = sum(size_of[p] for p in paths[r::new])
        got, _ = _run(paths[r::new], resharded[r], None, fifo=True,
                      records=_owed(resharded[r], size_of) + k * mine)
        delivered.append(got)
    counts = _counts(delivered, sum(SIZES))
    np.testing.assert_array_equal(counts, np.full(sum(SIZES), boundary + k))


def test_reshard_twice_2_3_2(tmp_path: Path) -> None:
    """A re-sharded run saves its ranks' rank and world; re-sharding it
    again keeps the count exact and checks the order by them."""
    paths, _ = _write(tmp_path, SIZES)
    delivered, states = [], []
    for r, stop in enumerate((3, 18)):
        got, state = _run(paths[r::2], None, 3, batches=stop)
        delivered.append(got)
        states.append(state)
    mid = []
    for r, state in enumerate(feedq.reshard_states(states, 3)):
        got, saved = _run(paths[r::3], state, 3, batches=4 + 9 * r)
        delivered.append(got)
        mid.append(saved)
        assert saved["shard"] == {"rank": r, "world": 3}
    with pytest.raises(InvalidArgumentError, match="state 0 is rank 1's: give the states in rank"):
        feedq.reshard_states([mid[1], mid[0], mid[2]], 2)
    with pytest.raises(InvalidArgumentError, match="from a run of 3 ranks, but 2 states"):
        feedq.reshard_states(mid[:2], 2)
    for r, state in enumerate(feedq.reshard_states(mid, 2)):
        got, _ = _run(paths[r::2], state, 3)
        delivered.append(got)
    counts = _counts(delivered, sum(SIZES))
    np.testing.assert_array_equal(counts, np.full(sum(SIZES), 3))


def test_wrong_order_duplicates_and_other_jobs_are_refused(tmp_path: Path) -> None:
    paths, _ = _write(tmp_path, SIZES[:4])  # 2 ranks: 2 files each
    states = [_run(paths[r::2], None, 1, batches=2)[1] for r in range(2)]
    with pytest.raises(InvalidArgumentError, match=r"state 0 is not rank 0's of 2 .*\[1::2\]"):
        feedq.reshard_states(states[::-1], 3, files=paths)
    with pytest.raises(InvalidArgumentError, match="states 0 and 1 both read .*same rank's"):
        feedq.reshard_states([states[0], states[0]], 3)
    with pytest.raises(InvalidArgumentError, match=r"state 1 is not rank 1's .*\[0::2\]"):
        feedq.reshard_states([states[0], states[0]], 3, files=paths)
    with pytest.raises(InvalidArgumentError, match="5 new ranks for 4 files"):
        feedq.reshard_states(states, 5)
    other = _run(paths[1::2], None, 1, batches=2, seed=6)[1]
    with pytest.raises(InvalidArgumentError, match=r"state 1's producer differs .*\(seed\)"):
        feedq.reshard_states([states[0], other], 3)
    (tmp_path / "five").mkdir()
    paths5, _ = _write(tmp_path / "five", SIZES[:5])  # unequal shards: 3 and 2 files
    states5 = [_run(paths5[r::2], None, 1, batches=2)[1] for r in range(2)]
    with pytest.raises(InvalidArgumentError, match="wrong rank order"):
        feedq.reshard_states(states5[::-1], 3)
    resharded = feedq.reshard_states(states5, 3)
    with pytest.raises(InvalidArgumentError, match=r"for rank 1 of 3: it must read files\[1::3\]"):
        _run(paths5[0::3], resharded[1], 1)


def test_shard_files_states_name_their_rank(tmp_path: Path) -> None:
    """Shards of equal sizes from ``shard_files``: the states say which rank
    saved them, so the wrong order is refused without ``files=``."""
    paths, _ = _write(tmp_path, SIZES[:4])
    states = []
    for r in range(2):
        shard = feedq.distributed.shard_files(paths, r, 2)
        assert shard == paths[r::2]
        states.append(_run(shard, None, 1, batches=2)[1])
        assert states[-1]["shard"] == {"rank": r, "world": 2}
    with pytest.raises(InvalidArgumentError, match="state 0 is rank 1's: give the states in rank"):
        feedq.reshard_states(states[::-1], 3)
    with pytest.raises(InvalidArgumentError, match="state 1 is rank 0's"):
        feedq.reshard_states([states[0], states[0]], 3)
    assert [s["shard"] for s in feedq.reshard_states(states, 3)] == [
        {"rank": r, "world": 3} for r in range(3)
    ]
