"""Every reader, the producers' globs, shard_files and TFRecordWriter against a
real S3 server on loopback (moto): every record once, bytes and keys as the
local read gives them (keys with the URL for the path)."""

from __future__ import annotations

import gzip
import os
import random
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import feedq
import feedq.storage as storage
from feedq.errors import NotFoundError, OutOfRangeError
from feedq.queues import FIFOQueue
from feedq.readers import (
    FixedLengthRecordReader,
    ParquetReader,
    TextLineReader,
    TFRecordReader,
    TFRecordWriter,
    WholeFileReader,
)
from tests.storage.conftest import SECRET, Bucket

pytestmark = pytest.mark.timeout(30)


def closed_queue(*names: str | Path) -> FIFOQueue:
    q = FIFOQueue(capacity=-1, dtypes=["string"], shapes=[[]])
    q.enqueue_many([[str(n) for n in names]])
    q.close()
    return q


def read_all(reader: Any, names: list[str], n: int = 64) -> tuple[list[bytes], list[bytes]]:
    keys: list[bytes] = []
    values: list[bytes] = []
    q = closed_queue(*names)
    with reader:
        while True:
            try:
                k, v = reader.read_up_to(q, n)
            except OutOfRangeError:
                return keys, values
            keys += k.tolist()
            values += v.tolist()


def records(seed: int, n: int = 120) -> list[bytes]:
    rng = random.Random(seed)
    # Varying lengths, some larger than a 64 KiB read-ahead block.
    return [rng.randbytes(rng.choice([0, 3, 100, 2000, 9000, 70_000])) for _ in range(n)]


def local_and_remote(tmp_path: Path, s3: Bucket, name: str, data: bytes) -> tuple[str, str]:
    p = tmp_path / name
    p.write_bytes(data)
    return str(p), s3.put(f"data/{name}", data)


def same_read(make: Any, local: str, remote: str) -> list[bytes]:
    lk, lv = read_all(make(), [local])
    rk, rv = read_all(make(), [remote])
    assert rv == lv and len(rv) > 0
    assert [k.replace(remote.encode(), local.encode()) for k in rk] == lk
    return rv


@pytest.mark.parametrize("compression", ["", "GZIP", "ZLIB", "ZSTD"])
def test_tfrecord_every_compression_reads_as_local(tmp_path: Path, s3: Bucket,
                                                   compression: str) -> None:
    if compression == "ZSTD":
        pytest.importorskip("zstandard")
    recs = records(1)
    p = tmp_path / "a.tfr"
    with TFRecordWriter(p, compression or None) as w:
        w.write_many(recs)
    remote = s3.put("data/a.tfr", p.read_bytes())
    got = same_read(lambda: TFRecordReader(options=compression or None), str(p), remote)
    assert got == recs
    stats = storage.statistics()
    assert stats["files_opened"] == 1 and stats["bytes"] == p.stat().st_size
    assert stats["requests"] >= p.stat().st_size // (64 << 10)


def test_text_csv_fixed_whole_read_as_local(tmp_path: Path, s3: Bucket) -> None:
    rng = random.Random(2)
    lines = [",".join(str(rng.randrange(10**6)) for _ in range(rng.randrange(1, 40)))
             for _ in range(4000)]
    text = ("id,values\n" + "\n".join(lines) + "\n").encode()
    local, remote = local_and_remote(tmp_path, s3, "a.csv", text)
    got = same_read(lambda: TextLineReader(skip_header_lines=1), local, remote)
    assert got == [ln.encode() for ln in lines]
    gz_local, gz_remote = local_and_remote(tmp_path, s3, "a.csv.gz", gzip.compress(text))
    assert same_read(lambda: TextLineReader(skip_header_lines=1, compression="GZIP"),
                     gz_local, gz_remote) == got

    fixed = rng.randbytes(8 + 13 * 9000 + 5)
    local, remote = local_and_remote(tmp_path, s3, "a.bin", fixed)
    got = same_read(lambda: FixedLengthRecordReader(13, header_bytes=8, footer_bytes=5),
                    local, remote)
    assert got == [fixed[8 + 13 * i : 8 + 13 * (i + 1)] for i in range(9000)]
    zl_local, zl_remote = local_and_remote(tmp_path, s3, "a.bin.z", zlib.compress(fixed))
    assert same_read(lambda: FixedLengthRecordReader(13, header_bytes=8, footer_bytes=5,
                                                     encoding="ZLIB"), zl_local, zl_remote) == got

    got = same_read(WholeFileReader, local, remote)
    assert got == [fixed]


def test_parquet_reads_as_local(tmp_path: Path, s3: Bucket) -> None:
    n = 5000
    rng = np.random.default_rng(3)
    table = pa.table({"x": np.arange(n), "s": [f"row-{i}" * (i % 7) for i in range(n)],
                      "f": rng.random(n)})
    p = tmp_path / "a.parquet"
    pq.write_table(table, p, row_group_size=700)
    remote = s3.put("data/a.parquet", p.read_bytes())
    cols: dict[str, list[Any]] = {"x": [], "s": [], "f": []}
    with ParquetReader() as r:
        q = closed_queue(remote)
        while True:
            try:
                keys, block = r.read_up_to(q, 900)
            except OutOfRangeError:
                break
            for c in cols:
                cols[c] += block[c].tolist()
    assert cols["x"] == list(range(n))
    assert cols["s"] == table.column("s").to_pylist()
    assert cols["f"] == table.column("f").to_pylist()


def test_resumed_reader_state_names_the_url_and_continues(tmp_path: Path, s3: Bucket) -> None:
    recs = records(4)
    p = tmp_path / "a.tfr"
    with TFRecordWriter(p, "GZIP") as w:
        w.write_many(recs)
    remote = s3.put("data/a.tfr.gz", p.read_bytes())
    q = closed_queue(remote)
    with TFRecordReader(options="GZIP") as r:
        first = r.read_up_to(q, 100)[1].tolist()
        state = r.state_dict()
    assert remote.encode() in repr(state).encode() and SECRET not in repr(state)
    r2 = TFRecordReader(options="GZIP")
    r2.load_state_dict(state)
    rest = read_all(r2, [])[1]  # the empty, closed queue: only the restored file is read
    assert first + rest == recs


def test_match_filenames_once_and_shard_files_list_the_bucket(tmp_path: Path, s3: Bucket) -> None:
    names = [f"train/part-{i:03d}.tfrecord" for i in range(25)]
    for i, name in enumerate(names):
        with TFRecordWriter(tmp_path / "x.tfr") as w:
            w.write(str(i).encode())
        s3.put(name, (tmp_path / "x.tfr").read_bytes())
    s3.put("train/part-000.tfrecord.tmp", b"not matched")
    s3.put("train/sub/part-999.tfrecord", b"not matched: another segment")
    s3.put("eval/part-000.tfrecord", b"another prefix")
    matched = feedq.match_filenames_once(s3.url("train/part-*.tfrecord"))
    assert list(matched) == [s3.url(n) for n in names]
    assert storage.glob(s3.url("*/part-000.tfrecord")) == [
        s3.url("eval/part-000.tfrecord"), s3.url("train/part-000.tfrecord")]
    assert storage.glob(s3.url("train/part-00[0-2].tfrecord")) == [s3.url(n) for n in names[:3]]
    shard = feedq.distributed.shard_files(list(matched), 1, 4)
    assert shard == [s3.url(n) for n in names[1::4]]
    with pytest.raises(NotFoundError, match=r"no files match"):
        list(feedq.match_filenames_once(s3.url("nothing/*.tfrecord")))
    # A producer over the URLs, a reader and a batcher: every record once.
    reader = TFRecordReader()
    got: list[bytes] = []
    with feedq.Pipeline():
        files = feedq.string_input_producer(matched, num_epochs=1, shuffle=False)
        b = feedq.batch(lambda: [reader.read_up_to(files, 10)[1]], 7, enqueue_many=True,
                        dtypes=[feedq.STRING], shapes=[[]], allow_smaller_final_batch=True)
        while True:
            try:
                got += list(b.dequeue(timeout=10))
            except OutOfRangeError:
                break
    reader.close()
    assert got == [str(i).encode() for i in range(25)]


def test_tfrecord_writer_uploads_and_reads_back(tmp_path: Path, s3: Bucket) -> None:
    recs = records(5, 120)
    url = s3.url("out/w.tfrecord.gz")
    with TFRecordWriter(url, "GZIP") as w:
        w.write_many(recs)
    body = s3.client.get_object(Bucket=s3.name, Key="out/w.tfrecord.gz")["Body"].read()
    local = tmp_path / "w.tfrecord.gz"
    with TFRecordWriter(local, "GZIP") as w:
        w.write_many(recs)
    assert gzip.decompress(body) == gzip.decompress(local.read_bytes())  # never re-compressed
    assert list(feedq.readers.tf_record_iterator(url, "GZIP")) == recs


def test_missing_object_and_bucket_are_not_found_naming_the_url(s3: Bucket) -> None:
    r = TFRecordReader()
    gone = s3.url("data/gone.tfr")
    good = s3.put("data/one.tfr", b"")
    q = closed_queue(gone, good)
    with pytest.raises(NotFoundError, match=rf"^{gone}; No such file or directory"):
        r.read_up_to(q, 10)
    with pytest.raises(OutOfRangeError):  # moved on: the empty file, then the end
        r.read_up_to(q, 10)
    with pytest.raises(NotFoundError, match=r"s3://feedq-no-such-bucket/x"):
        storage.open_remote("s3://feedq-no-such-bucket/x")
    r.close()


def test_credentials_in_a_url_are_refused_and_never_shown(s3: Bucket) -> None:
    url = f"s3://{'AKIA'}:{SECRET}@{s3.name}/data/a.tfr"
    with pytest.raises(feedq.errors.InvalidArgumentError) as info:
        storage.open_remote(url)
    assert SECRET not in str(info.value) and "***@" in str(info.value)
    r = TFRecordReader()
    with pytest.raises(feedq.errors.InvalidArgumentError) as info:
        r.read_up_to(closed_queue(url), 1)
    assert SECRET not in str(info.value)
    r.close()
    assert SECRET not in repr(storage.statistics())


def test_environment_untouched_outside_the_fixture() -> None:
    # The fixtures set the AWS variables with monkeypatch only.
    assert os.environ.get("AWS_SECRET_ACCESS_KEY") != SECRET


def test_pipeline_statistics_count_the_remote_reads_since_the_pipeline_started(
    tmp_path: Path, s3: Bucket
) -> None:
    recs = records(3, 200)
    urls = []
    size = 0
    for i in range(3):
        p = tmp_path / f"s{i}.tfr"
        with TFRecordWriter(p) as w:
            w.write_many(recs)
        size += p.stat().st_size
        urls.append(s3.put(f"stats/s{i}.tfr", p.read_bytes()))
    read_all(TFRecordReader(), urls[:1])  # before the pipeline: not its reads
    with feedq.Pipeline() as pipe:
        files = feedq.string_input_producer(urls, num_epochs=1, shuffle=False)
        reader = pipe.closing(TFRecordReader())
        stage = feedq.batch([lambda: reader.read_block(files, 50).values()], 50, enqueue_many=True,
                            dtypes=["string"], shapes=[[]], allow_smaller_final_batch=True)
        got = sum(len(b) for b in stage)
        stats = pipe.statistics()
    assert got == 3 * len(recs)
    st = stats.storage
    assert st is not None
    assert st.files_opened == 3 and st.bytes == size and st.requests >= 3
    assert st.retries == st.throttled == st.failures == 0 and st.wait_s >= 0
    assert stats.as_dict()["storage"]["files_opened"] == 3
    assert "remote storage: 3 files opened" in feedq.format_report(stats)


def test_a_local_pipeline_has_no_storage_figures(tmp_path: Path) -> None:
    p = tmp_path / "local.tfr"
    with TFRecordWriter(p) as w:
        w.write_many(records(4, 20))
    with feedq.Pipeline() as pipe:
        files = feedq.string_input_producer([str(p)], num_epochs=1)
        reader = pipe.closing(TFRecordReader())
        stage = feedq.batch([lambda: reader.read_block(files, 8).values()], 8, enqueue_many=True,
                            dtypes=["string"], shapes=[[]], allow_smaller_final_batch=True)
        assert sum(len(b) for b in stage) == 20
        stats = pipe.statistics()
    assert stats.storage is None and "remote storage" not in feedq.format_report(stats)
