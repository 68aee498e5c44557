"""Resumption across pipeline shapes: restores of restored runs, single-record
reads, dynamic padding and sparse components."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import feedq
from feedq.cli.datasets import _example, _int64_feature, _tfrecord_bytes
from feedq.readers import (
    FixedLenFeature,
    TextLineReader,
    TFRecordReader,
    VarLenFeature,
    decode_csv,
    parse_example,
)
from tests.resume import _support as rs


@pytest.mark.parametrize("fmt", ["csv", "memory"])
@pytest.mark.parametrize("mode", ["exact", "fifo", "threads"])
def test_restore_a_restored_run(tmp_path: Path, fmt: str, mode: str) -> None:
    """Killed three times (after 7, 5 and 1 more batches): still the
    uninterrupted run's batches (exact), or every record once (threads)."""
    data = rs.write_data(tmp_path, fmt, files=4)
    epochs = 1 if mode == "threads" else 2

    def build(pipe: feedq.Pipeline) -> None:
        rs.build(pipe, data, mode, epochs)

    state = None
    got: list[Any] = []
    for k in (7, 5, 1, None):
        part, state = rs.run_to(build, state, k)
        got += part
    if mode == "threads":
        ids = np.sort(np.concatenate([g[0] for g in got]))
        np.testing.assert_array_equal(ids, np.arange(data["total"]))
    else:
        assert rs.same(got, rs.run(data, mode, epochs))


def _csv(tmp_path: Path) -> list[str]:
    paths, rid = [], 0
    for f in range(4):
        p = tmp_path / f"f{f}.csv"
        p.write_text("".join(f"{i}\n" for i in range(rid, rid + 37 + f)))
        rid += 37 + f
        paths.append(str(p))
    return paths


def test_single_record_reads_and_dynamic_pad(tmp_path: Path) -> None:
    """reader.read() one record at a time (enqueue_many=False), through a
    shuffle buffer and through a padding FIFO batcher."""
    paths = _csv(tmp_path)

    def reader_fn(pipe: feedq.Pipeline) -> Any:
        files = feedq.string_input_producer(paths, num_epochs=2, seed=1)
        reader = pipe.closing(TextLineReader())

        def read() -> Any:
            (i,) = decode_csv(reader.read(files)[1], record_defaults=[[0]])
            return i
        return read

    def shuffled(pipe: feedq.Pipeline) -> None:
        feedq.shuffle_batch(reader_fn(pipe), 8, capacity=100, min_after_dequeue=50, seed=3,
                            dtypes=[np.int32], shapes=[[]], allow_smaller_final_batch=True)

    def padded(pipe: feedq.Pipeline) -> None:
        read = reader_fn(pipe)
        feedq.batch(lambda: (lambda i: [i, np.arange(int(i) % 5)])(read()), 8, dynamic_pad=True,
                    dtypes=[np.int32, np.int64], shapes=[[], [None]], allow_smaller_final_batch=True)

    for build, key in ((shuffled, lambda b: (np.asarray(b).copy(),)),
                       (padded, lambda b: (b[0].copy(), b[1].copy()))):
        rs.check_save_restore(build, (1, 9, 15), key)


def test_sparse_components(tmp_path: Path) -> None:
    paths, rid = [], 0
    for f in range(3):
        p = tmp_path / f"f{f}.tfrecord"
        records = []
        for _ in range(30):
            records.append(_example([(b"id", _int64_feature([rid])),
                                     (b"v", _int64_feature(list(range(rid % 4))))]))
            rid += 1
        p.write_bytes(_tfrecord_bytes(records))
        paths.append(str(p))
    spec = {"id": FixedLenFeature([], np.int64), "v": VarLenFeature(np.int64)}

    def build(pipe: feedq.Pipeline) -> None:
        files = feedq.string_input_producer(paths, num_epochs=1, seed=1)
        reader = pipe.closing(TFRecordReader())

        def read() -> dict[str, Any]:
            got = parse_example(reader.read_block(files, 10), spec)
            return {"id": got["id"], "v": got["v"]}

        feedq.shuffle_batch(read, 8, capacity=60, min_after_dequeue=20, seed=3, enqueue_many=True,
                            dtypes={"id": np.int64, "v": VarLenFeature(np.int64)},
                            shapes={"id": [], "v": [None]}, allow_smaller_final_batch=True)

    def key(b: dict[str, Any]) -> tuple[Any, ...]:
        return b["id"].copy(), np.asarray(b["v"].values).copy(), np.asarray(b["v"].indices).copy()

    rs.check_save_restore(build, (2, 6), key)
