"""Faults between feedq and a real S3 server (the loopback fault proxy):
503 SlowDown, truncated bodies and connection resets at chosen offsets are
retried below decompression -- every record once, none twice; a spent retry
budget is a named error after every good record; a resumable pipeline
restored mid-file continues exactly."""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import feedq
import feedq.storage as storage
from feedq.errors import (
    DataLossError,
    NotFoundError,
    OutOfRangeError,
    PermissionDeniedError,
    UnavailableError,
)
from feedq.queues import FIFOQueue
from feedq.readers import TFRecordReader, TFRecordWriter
from tests.storage.conftest import KEY_ID, SECRET, Bucket
from tests.storage.faults import FaultProxy

pytestmark = pytest.mark.timeout(30)

BLOCK = 64 << 10  # the fixture's read-ahead block


def closed_queue(*names: str) -> FIFOQueue:
    q = FIFOQueue(capacity=-1, dtypes=["string"], shapes=[[]])
    q.enqueue_many([list(names)])
    q.close()
    return q


def upload(tmp_path: Path, s3: Bucket, key: str, recs: list[bytes], compression: str = "") -> str:
    p = tmp_path / key.replace("/", "_")
    with TFRecordWriter(p, compression or None) as w:
        w.write_many(recs)
    return s3.put(key, p.read_bytes())


def numbered(n: int, seed: int) -> list[bytes]:
    """Records that carry their index (so duplicates and losses show), of varying size."""
    rng = random.Random(seed)
    return [i.to_bytes(4, "big") + rng.randbytes(rng.choice([0, 50, 900, 6000, 30_000]))
            for i in range(n)]


def drain(reader: Any, q: Any, n: int = 25) -> tuple[list[bytes], BaseException | None]:
    out: list[bytes] = []
    while True:
        try:
            out += reader.read_up_to(q, n)[1].tolist()
        except OutOfRangeError:
            return out, None
        except (DataLossError, UnavailableError, PermissionDeniedError, NotFoundError) as exc:
            return out, exc


@pytest.mark.parametrize("compression", ["", "GZIP"])
def test_slowdown_truncation_and_reset_lose_and_duplicate_nothing(
        tmp_path: Path, s3: Bucket, proxy: FaultProxy, compression: str) -> None:
    recs = numbered(150, 1)
    url = upload(tmp_path, s3, "a.tfr", recs, compression)
    size = s3.client.head_object(Bucket=s3.name, Key="a.tfr")["ContentLength"]
    assert size > 4 * BLOCK
    proxy.add("503", start=0, times=2)            # the first block twice
    proxy.add("truncate", start=BLOCK, keep=1000)   # a body cut after 1,000 bytes
    proxy.add("reset", start=2 * BLOCK, keep=0)     # a reset before any byte
    proxy.add("reset", start=3 * BLOCK, keep=30_000)  # ... and after 30,000
    with TFRecordReader(options=compression or None) as r:
        got, err = drain(r, closed_queue(url))
    assert err is None
    assert got == recs  # every record once, in order, bytes identical
    faulted = [s for s in proxy.seen if s.fault]
    assert sorted(f.fault or "" for f in faulted) == ["503", "503", "reset", "reset", "truncate"]
    # Each block is asked for once more per fault on it, and once otherwise
    # (pyarrow drops a cut body: the block is asked for again, whole).
    starts = [s.start for s in proxy.seen if s.method == "GET" and not s.fault]
    assert sorted(starts) == sorted(set(starts)) and len(starts) == -(-size // BLOCK)
    stats = storage.statistics()
    assert stats["retries"] == 5 and stats["throttled"] == 2 and stats["failures"] == 0
    assert stats["bytes"] == size  # nothing counted twice


def test_spent_budget_is_a_data_loss_naming_url_and_offset_after_every_good_record(
        tmp_path: Path, s3: Bucket, proxy: FaultProxy) -> None:
    storage.configure(retry_budget_s=0.3)
    recs = numbered(150, 2)
    url = upload(tmp_path, s3, "b.tfr", recs)
    proxy.add("503", start=2 * BLOCK, times=10**6)
    r = TFRecordReader()
    t0 = time.monotonic()
    got, err = drain(r, closed_queue(url))
    assert time.monotonic() - t0 < 10
    assert isinstance(err, DataLossError)
    assert f"{url}: read failed at offset {2 * BLOCK} after" in str(err)
    assert "retry budget 0.3 s" in str(err) and SECRET not in str(err) and KEY_ID not in str(err)
    # Every record that ends before the failing block came once, in order; none after.
    assert got == recs[: len(got)] and len(got) > 0
    ends = np.cumsum([16 + len(x) for x in recs])
    assert len(got) == int(np.searchsorted(ends, 2 * BLOCK, side="right"))
    assert storage.statistics()["failures"] >= 1
    # The reader reported it once and moved on: the queue is at its end.
    with pytest.raises(OutOfRangeError):
        r.read_up_to(closed_queue(), 1)
    r.close()


def test_denied_and_unreachable_opens_are_named_and_the_reader_moves_on(
        tmp_path: Path, s3: Bucket, proxy: FaultProxy) -> None:
    storage.configure(retry_budget_s=0.3)
    denied = upload(tmp_path, s3, "denied.tfr", [b"x"])
    down = upload(tmp_path, s3, "down.tfr", [b"y"])
    good = upload(tmp_path, s3, "good.tfr", [b"z"])
    proxy.add("403", method="HEAD", times=1)
    r = TFRecordReader()
    q = closed_queue(denied, down, good)
    with pytest.raises(PermissionDeniedError, match=rf"^{denied}: permission denied") as info:
        r.read_up_to(q, 5)
    assert SECRET not in str(info.value)
    proxy.add("503", method="HEAD", times=10**6)
    with pytest.raises(UnavailableError, match=rf"^{down}: open failed after \d+ attempts"):
        r.read_up_to(q, 5)
    proxy.clear()
    assert r.read_up_to(q, 5)[1].tolist() == [b"z"]
    r.close()


def _build(urls: list[str], seed: int) -> Any:
    files = feedq.string_input_producer(urls, num_epochs=1, seed=seed)
    reader = TFRecordReader(options="GZIP")
    return feedq.shuffle_batch(lambda: [reader.read_block(files, 16).values()], 8, 120, 40,
                               enqueue_many=True, dtypes=[feedq.STRING], shapes=[[]],
                               allow_smaller_final_batch=True, seed=seed + 1)


def _batches(pipe: Any) -> list[list[bytes]]:
    return [list(b) for b in pipe]


def test_resumable_pipeline_restored_mid_file_through_faults_continues_exactly(
        tmp_path: Path, s3: Bucket, proxy: FaultProxy) -> None:
    urls = [upload(tmp_path, s3, f"r/{i}.tfr.gz", numbered(60, 10 + i), "GZIP") for i in range(3)]
    with feedq.Pipeline(resumable=True) as pipe:
        _build(urls, 7)
        whole = _batches(pipe)
    proxy.clear()
    # The interrupted run: a reset and a SlowDown on the way, a state after 5 batches.
    proxy.add("reset", start=0, keep=500, times=2)
    with feedq.Pipeline(resumable=True) as pipe:
        _build(urls, 7)
        it = iter(pipe)
        first = [list(next(it)) for _ in range(5)]
        state = pipe.state_dict()
    assert SECRET not in repr(state) and KEY_ID not in repr(state)
    assert all(u in repr(state) for u in urls)
    # The restored run, through faults again: the batches the whole run had next.
    proxy.clear()
    proxy.add("503", start=None, times=3)
    proxy.add("truncate", start=0, keep=100, times=1)
    with feedq.Pipeline(state=state) as pipe:
        _build(urls, 7)
        rest = _batches(pipe)
    assert sorted(s.fault for s in proxy.seen if s.fault) == ["503"] * 3 + ["truncate"]
    assert first + rest == whole
    ids = sorted(int.from_bytes(x[:4], "big") for b in whole for x in b)
    assert len(ids) == 180  # 3 files x 60 records, each once


def test_parquet_ranges_are_retried_and_a_spent_budget_names_the_row_group(
        tmp_path: Path, s3: Bucket, proxy: FaultProxy) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from feedq.readers import ParquetReader

    n = 4000
    table = pa.table({"x": np.arange(n), "s": [f"v{i}" * (i % 9) for i in range(n)]})
    p = tmp_path / "a.parquet"
    pq.write_table(table, p, row_group_size=1000)
    url = s3.put("a.parquet", p.read_bytes())

    def rows(reader: Any) -> tuple[list[int], BaseException | None]:
        q = closed_queue(url)
        got: list[int] = []
        while True:
            try:
                got += reader.read_up_to(q, 700)[1]["x"].tolist()
            except OutOfRangeError:
                return got, None
            except DataLossError as exc:
                return got, exc

    proxy.add("503", start=None, times=4)  # the first ranges (footer, first groups) throttled
    with ParquetReader() as r:
        got, err = rows(r)
    assert err is None and got == list(range(n))
    assert sorted(s.fault for s in proxy.seen if s.fault) == ["503"] * 4
    proxy.clear()
    storage.configure(retry_budget_s=0.2)
    with ParquetReader() as r:
        q = closed_queue(url)
        got = r.read_up_to(q, 1000)[1]["x"].tolist()  # the footer and row group 0
        proxy.add("503", start=None, times=10**6)  # from now on the store fails
        with pytest.raises(DataLossError) as info:
            while True:
                got += r.read_up_to(q, 1000)[1]["x"].tolist()
    assert got == list(range(1000))  # every row before the failure, once
    msg = str(info.value)
    assert msg.startswith(f"{url}: row group 1 (rows 1000-1999) could not be read: ") and (
        "read failed at offset" in msg and "retry budget 0.2 s" in msg), msg
