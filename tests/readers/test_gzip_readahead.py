"""GZIP / ZLIB TFRecord files inflate on the read-ahead thread in large
chunks (zlib runs without the GIL), while the reading thread parses (R13)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import feedq.readers._io as io_mod
from feedq.errors import OutOfRangeError
from feedq.queues import FIFOQueue
from feedq.readers import (
    FixedLenFeature,
    TFRecordReader,
    TFRecordWriter,
    parse_example,
    serialize_example,
)

pytestmark = pytest.mark.timeout(60)


def closed_queue(path: Path) -> FIFOQueue:
    q = FIFOQueue(capacity=-1, dtypes=["string"], shapes=[[]])
    q.enqueue_many([[str(path)]])
    q.close()
    return q


@pytest.mark.parametrize("compression", ["GZIP", "ZLIB"])
def test_inflate_runs_ahead_in_chunks_of_megabytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, compression: str
) -> None:
    rng = np.random.default_rng(3)
    # Random floats barely compress: 12 MiB of records is ~11 MiB of gzip.
    x = rng.standard_normal((40_000, 64)).astype(np.float32)
    recs = [serialize_example({"x": x[i], "label": i}) for i in range(len(x))]
    p = tmp_path / "big.tfrecord.gz"
    with TFRecordWriter(p, compression) as w:
        w.write_many(recs)
    produced: list[tuple[str, int]] = []
    reads: list[int] = []
    real, real_read = io_mod._Inflater.produce, io_mod._Inflater._read_raw

    def recording(self: Any, n: int) -> bytes:
        out: bytes = real(self, n)
        produced.append((threading.current_thread().name, len(out)))
        return out

    def recording_read(self: Any) -> bytes:
        out: bytes = real_read(self)
        reads.append(len(out))
        return out

    monkeypatch.setattr(io_mod._Inflater, "produce", recording)
    monkeypatch.setattr(io_mod._Inflater, "_read_raw", recording_read)
    feats = {"x": FixedLenFeature([64], np.float32), "label": FixedLenFeature([], np.int64)}
    got_x, got_label = [], []
    with TFRecordReader(options=compression) as r:
        q = closed_queue(p)
        while True:
            try:
                block = r.read_block(q, 1 << 20)
            except OutOfRangeError:
                break
            out = parse_example(block, feats)
            got_x.append(out["x"])
            got_label.append(out["label"])
    assert np.concatenate(got_label).tolist() == list(range(len(x)))
    assert np.concatenate(got_x).tobytes() == x.tobytes()
    # Every chunk was inflated on the read-ahead thread, not the reader's.
    assert produced and all(name.startswith("feedq-inflate:") for name, _ in produced)
    sizes = [n for _, n in produced if n]
    total = sum(sizes)
    assert total == sum(12 + len(r) + 4 for r in recs)
    # Steps of 1 MiB of compressed input (each read and inflate call runs
    # without the GIL): a dozen reads for ~11 MiB instead of ~45, and at
    # most two chunks (the 1 MiB cap and the rest) per step.
    compressed = p.stat().st_size
    assert sum(reads) == compressed
    assert len(reads) <= compressed // (1 << 20) + 2
    assert len(sizes) <= 2 * len(reads)
    assert max(sizes) == 1 << 20
