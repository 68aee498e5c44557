"""Pipeline and stage state: the API, its guarantees and its refusals.

In-process resumption (exact and any mode, ``upto``), elastic re-sharding
2->3 and 3->2, plain data (pickle, ``torch.save`` / ``torch.load`` with
``weights_only=True``), the size bound for a 10,000-element shuffle buffer,
and clear errors for mismatched, late, untraceable or non-resumable use.
"""

from __future__ import annotations

import io
import itertools
import pickle
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import feedq
from feedq._resume.ledger import bits_to_ranges, pack, ranges_to_bits, unpack
from feedq.errors import FailedPreconditionError, InvalidArgumentError
from feedq.readers import TextLineReader, decode_csv
from tests.resume import _support as rs


def _first(batch: Any) -> np.ndarray:
    """A batch's first component (a copy)."""
    return np.asarray(batch[0] if isinstance(batch, list) else batch).copy()


def _consume(stage_or_pipe: Any, k: int | None = None) -> list[np.ndarray]:
    out = []
    for i, batch in enumerate(stage_or_pipe):
        out.append(_first(batch))
        if k is not None and i + 1 == k:
            break
    return out


# -- helpers of the ledger ------------------------------------------------------------


def test_ranges_round_trip() -> None:
    rng = np.random.default_rng(0)
    for _ in range(50):
        bits = rng.random(int(rng.integers(0, 200))) < 0.5
        ranges = bits_to_ranges(bits)
        back = ranges_to_bits(ranges)
        np.testing.assert_array_equal(back, bits[: back.shape[0]])
        assert not bits[back.shape[0]:].any()


def test_pack_round_trip_and_corrupt() -> None:
    arr = np.array([0, 1, -1, 1 << 40, 7], dtype=np.int64)
    text = pack(arr)
    assert isinstance(text, str)
    np.testing.assert_array_equal(unpack(text), arr)
    with pytest.raises(InvalidArgumentError, match="corrupt"):
        unpack("not base64!")


# -- in-process resumption --------------------------------------------------------------


@pytest.mark.parametrize("mode", ["exact", "fifo"])
def test_exact_resume_every_k_with_upto(tmp_path: Path, mode: str) -> None:
    """Resuming from the state as of batch k (upto=k, while later batches
    were already taken) gives the uninterrupted run's batches from k on."""
    data = rs.write_data(tmp_path, "csv", files=3)
    reference = rs.run(data, mode, 2)
    n = len(reference)
    stages: list[feedq.Stage] = []

    def build(pipe: feedq.Pipeline) -> None:
        stages.append(rs.build(pipe, data, mode, 2))

    for r in rs.save_restore(build, (0, 1, n // 2, n - 1, n), ahead=3):
        assert len(r.before) == min(n, r.stop + 3)
        assert stages[-2].taken == len(r.before)  # the saving run's stage
        assert len(r.after) == n - r.stop
        for a, ref in zip(r.after, reference[r.stop:]):
            np.testing.assert_array_equal(a[0], ref[0])
            np.testing.assert_array_equal(a[1], ref[1])


def test_any_mode_exactly_once_with_upto(tmp_path: Path) -> None:
    """Three reader threads: every record not delivered as of ``upto`` comes
    exactly once after a restore, none that was."""
    data = rs.write_data(tmp_path, "tfrecord", files=5)

    def build(pipe: feedq.Pipeline) -> None:
        rs.build(pipe, data, "threads", 1)

    for r in rs.save_restore(build, (0, 3, 10), ahead=2):
        got = [ids for ids, _ in r.before]
        ids = np.sort(np.concatenate(got[: r.stop] + [a[0] for a in r.after]))
        np.testing.assert_array_equal(ids, np.arange(data["total"]))


def test_load_state_dict_on_a_built_pipeline(tmp_path: Path) -> None:
    data = rs.write_data(tmp_path, "memory")
    reference = rs.run(data, "exact", 1)
    with feedq.Pipeline(resumable=True) as pipe:
        rs.build(pipe, data, "exact", 1)
        _consume(pipe, 4)
        state = pipe.state_dict()
    pipe2 = feedq.Pipeline(resumable=True)
    with pipe2.as_default():
        rs.build(pipe2, data, "exact", 1)
    pipe2.load_state_dict(state)
    with pipe2:
        after = [rs.as_arrays(b) for b in pipe2]
    assert len(after) == len(reference) - 4
    for a, ref in zip(after, reference[4:]):
        np.testing.assert_array_equal(a[0], ref[0])


def test_state_before_anything_and_after_the_end(tmp_path: Path) -> None:
    data = rs.write_data(tmp_path, "memory")
    with feedq.Pipeline(resumable=True) as pipe:
        rs.build(pipe, data, "exact", 1)
        first = pipe.state_dict()
        everything = _consume(pipe)
        last = pipe.state_dict()
    assert first["taken"] == 0 and last["taken"] == len(everything)
    assert rs.run(data, "exact", 1, state=last) == []
    again = rs.run(data, "exact", 1, state=first)
    assert len(again) == len(everything)
    # A state saved right after a restore, before a take, is the one loaded.
    with feedq.Pipeline(state=last) as pipe:
        rs.build(pipe, data, "exact", 1)
        assert pipe.state_dict()["exact"] == last["exact"]


# -- elastic --------------------------------------------------------------------------------


def _rank_run(paths: list[str], state: dict[str, Any] | None, stop: int | None) -> tuple[list[np.ndarray], dict[str, Any]]:
    def build(pipe: feedq.Pipeline) -> None:
        files = feedq.string_input_producer(paths, num_epochs=1, seed=5)
        reader = pipe.closing(TextLineReader())

        def read() -> list[Any]:
            (i,) = decode_csv(reader.read_block(files, 25), record_defaults=[[0]])
            return [i]

        feedq.shuffle_batch(read, 8, capacity=200, min_after_dequeue=100, seed=1, enqueue_many=True,
                            dtypes=[np.int32], shapes=[[]], allow_smaller_final_batch=True)

    return rs.run_to(build, state, stop, key=_first)


@pytest.mark.parametrize(("old", "new"), [(2, 3), (3, 2)])
def test_elastic_reshard(tmp_path: Path, old: int, new: int) -> None:
    rng = np.random.default_rng(old)
    paths, rid = [], 0
    for f in range(12):
        p = tmp_path / f"f{f:02d}.csv"
        n = int(rng.integers(20, 70))
        p.write_text("".join(f"{i}\n" for i in range(rid, rid + n)))
        rid += n
        paths.append(str(p))
    delivered: list[np.ndarray] = []
    states = []
    for r in range(old):
        got, state = _rank_run(paths[r::old], None, [9, 30, 4][r])
        delivered += got
        states.append(pickle.loads(pickle.dumps(state)))
    resharded = feedq.reshard_states(states, new)
    assert len(resharded) == new
    for r in range(new):
        got, _ = _rank_run(paths[r::new], resharded[r], None)
        delivered += got
    ids = np.sort(np.concatenate(delivered))
    np.testing.assert_array_equal(ids, np.arange(rid))
    with pytest.raises(InvalidArgumentError, match="files"):
        _rank_run(paths[1::new], resharded[0], None)  # rank 0's state on rank 1's files


# -- plain data and bounds ----------------------------------------------------------------


def _big_pipeline(pipe: feedq.Pipeline) -> feedq.Stage:
    x = np.random.default_rng(0).integers(0, 255, (30_000, 1024), dtype=np.uint8)
    prod = feedq.slice_input_producer([x], shuffle=True, seed=3)
    return feedq.shuffle_batch(prod, 64, capacity=12_000, min_after_dequeue=10_000, seed=7)


def test_state_is_plain_bounded_data() -> None:
    """10,000-element shuffle buffer over 1 KiB records: the state is at
    most 256 KiB pickled, and loads with torch.load(weights_only=True)."""
    torch = pytest.importorskip("torch")
    with feedq.Pipeline(resumable=True) as pipe:
        stage = _big_pipeline(pipe)
        it = iter(pipe)
        for _ in range(200):
            next(it)
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            state = pipe.state_dict()
            times.append(time.perf_counter() - t0)
    assert unpack(state["exact"]["buffer"]).shape[0] >= 10_000  # the buffer is full
    assert stage.taken == 200
    blob = pickle.dumps(state)
    assert len(blob) <= 256 * 1024
    assert sorted(times)[2] < 0.2  # 20 ms measured by benchmarks/resume_state.py; slack for CI
    buf = io.BytesIO()
    torch.save(state, buf)
    buf.seek(0)
    loaded = torch.load(buf, weights_only=True)
    assert loaded == state


# -- refusals -----------------------------------------------------------------------------------


def test_mismatch_files_and_batch_size(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = rs.write_data(tmp_path / "a", "csv", files=3)
    other = rs.write_data(tmp_path / "b", "csv", files=3, seed=9)
    with feedq.Pipeline(resumable=True) as pipe:
        rs.build(pipe, data, "exact", 1)
        _consume(pipe, 2)
        state = pipe.state_dict()
    with pytest.raises(InvalidArgumentError, match="producer inputs_crc32"):
        rs.run(other, "exact", 1, state=state)
    with pytest.raises(InvalidArgumentError, match="batcher min_after_dequeue|batcher batcher"):
        rs.run(data, "fifo", 1, state=state)
    monkeypatch.setattr(rs, "BATCH", 8)
    with pytest.raises(InvalidArgumentError, match="batch_size: saved 16, now 8"):
        rs.run(data, "exact", 1, state=state)
    monkeypatch.undo()
    with pytest.raises(InvalidArgumentError, match="not a feedq pipeline state"):
        rs.run(data, "exact", 1, state={"format": "other"})


def test_late_load_is_an_error(tmp_path: Path) -> None:
    data = rs.write_data(tmp_path, "memory")
    with feedq.Pipeline(resumable=True) as pipe:
        stage = rs.build(pipe, data, "exact", 1)
        state = pipe.state_dict()
        with pytest.raises(FailedPreconditionError, match="before"):
            pipe.load_state_dict(state)
        with pytest.raises(FailedPreconditionError, match="before"):
            stage.load_state_dict(state)


def test_untraceable_rows_and_non_resumable_stages() -> None:
    with feedq.Pipeline(resumable=True) as pipe:
        feedq.string_input_producer(["a", "b"], num_epochs=1)
        made = itertools.count()

        def make() -> int:
            return next(made)  # rows no reader or producer knows

        stage = feedq.batch(make, 2, dtypes=[np.int64], shapes=[[]])
        stage.dequeue(timeout=10)
        with pytest.raises(InvalidArgumentError, match="cannot be resumed"):
            pipe.state_dict()
    with feedq.Pipeline() as pipe:
        prod = feedq.range_input_producer(10, num_epochs=1)
        stage = feedq.batch(prod, 2)
        assert stage.taken == 0
        with pytest.raises(InvalidArgumentError, match="resumable=True"):
            stage.state_dict()
        with pytest.raises(InvalidArgumentError, match="resumable=True"):
            pipe.state_dict()


def test_one_producer_and_one_batcher_per_resumable_pipeline() -> None:
    with pytest.raises(InvalidArgumentError, match="one producer"), feedq.Pipeline(resumable=True):
        feedq.range_input_producer(4, num_epochs=1)
        feedq.range_input_producer(4, num_epochs=1)


def test_upto_outside_the_window(tmp_path: Path) -> None:
    data = rs.write_data(tmp_path, "memory")
    with feedq.Pipeline(resumable=True) as pipe:
        stage = rs.build(pipe, data, "exact", 1)
        _consume(pipe, 3)
        with pytest.raises(InvalidArgumentError, match="upto=4"):
            stage.state_dict(upto=4)
        with pytest.raises(InvalidArgumentError, match="upto"):
            stage.state_dict(upto=-1)


def test_parquet_any_mode_filters_column_blocks(tmp_path: Path) -> None:
    """Re-read Parquet units are subset (ColumnBlock.subset) like record blocks."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    paths, total = [], 0
    for f in range(4):
        n = 50 + 7 * f
        path = tmp_path / f"p{f}.parquet"
        pq.write_table(pa.table({"id": np.arange(total, total + n, dtype=np.int64)}), path,
                       row_group_size=16)
        paths.append(str(path))
        total += n

    def build(pipe: feedq.Pipeline) -> None:
        files = feedq.string_input_producer(paths, num_epochs=1, seed=2)
        readers = [pipe.closing(feedq.readers.ParquetReader()) for _ in range(2)]

        def read(r: Any) -> list[Any]:
            return [r.read_block(files, 20).values()["id"]]

        feedq.shuffle_batch_join([lambda r=r: read(r) for r in readers], 8, capacity=120,
                                 min_after_dequeue=60, enqueue_many=True, dtypes=[np.int64],
                                 shapes=[[]], allow_smaller_final_batch=True)

    (r,) = rs.save_restore(build, (6,), key=_first)
    np.testing.assert_array_equal(np.sort(np.concatenate(r.before + r.after)), np.arange(total))


def test_too_many_units_for_positions(monkeypatch: pytest.MonkeyPatch) -> None:
    from feedq._resume import positions

    monkeypatch.setattr(positions, "WORKLIST_BASE", 100)
    with feedq.Pipeline(resumable=True) as pipe:
        rows = feedq.slice_input_producer([np.arange(60)], num_epochs=3, shuffle=False)
        feedq.batch(rows, 10)
        _consume(pipe, 13)  # the producer is in epoch 1 or 2: units >= 100 exist
        with pytest.raises(InvalidArgumentError, match="more than positions can name"):
            pipe.state_dict()


def test_a_state_nothing_restores_is_an_error(tmp_path: Path) -> None:
    data = rs.write_data(tmp_path, "memory")
    with feedq.Pipeline(resumable=True) as pipe:
        rs.build(pipe, data, "exact", 1)
        state = pipe.state_dict()
    ids, x = rs._memory_arrays(data["total"])
    with feedq.Pipeline(state=state):
        stage = feedq.slice_input_producer([ids, x], num_epochs=1, seed=3)  # no batcher
        with pytest.raises(InvalidArgumentError, match="never restored"):
            stage.dequeue(timeout=5)
