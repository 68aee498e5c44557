"""TarReader: WebDataset-style shards, one record per sample (members grouped by key)."""

from __future__ import annotations

import gzip
import io
import logging
import tarfile
import threading
from pathlib import Path

import numpy as np
import pytest

from feedq.errors import DataLossError, OutOfRangeError
from feedq.queues import FIFOQueue
from feedq.readers import TarBlock, TarReader

pytestmark = pytest.mark.timeout(20)


def closed_queue(*names: str | Path) -> FIFOQueue:
    q = FIFOQueue(capacity=-1, dtypes=["string"], shapes=[[]])
    if names:
        q.enqueue_many([[str(n) for n in names]])
    q.close()
    return q


def sample_bytes(i: int) -> bytes:
    rng = np.random.default_rng(i)
    return rng.integers(0, 256, int(rng.integers(0, 3000)), dtype=np.uint8).tobytes()


def write_shard(path: Path, samples: list[tuple[str, dict[str, bytes]]],
                fmt: int = tarfile.USTAR_FORMAT, extra: list[tarfile.TarInfo] | None = None) -> Path:
    with tarfile.open(path, "w", format=fmt) as t:
        for info in extra or []:
            t.addfile(info)
        for key, fields in samples:
            for ext, data in fields.items():
                info = tarfile.TarInfo(f"{key}.{ext}")
                info.size = len(data)
                t.addfile(info, io.BytesIO(data))
    return path


def samples(n: int, start: int = 0) -> list[tuple[str, dict[str, bytes]]]:
    return [(f"c{i % 3}/s{i:04d}", {"jpg": sample_bytes(i), "cls": b"%d" % (i % 3)})
            for i in range(start, start + n)]


def read_all(reader: TarReader, q: FIFOQueue, n: int = 7) -> list[tuple[bytes, dict[str, bytes]]]:
    out = []
    while True:
        try:
            block = reader.read_block(q, n)
        except OutOfRangeError:
            return out
        assert isinstance(block, TarBlock) and 1 <= len(block) <= n
        out += list(zip(block.keys().tolist(), block.values().tolist()))


def test_members_grouped_by_key_in_order(tmp_path: Path) -> None:
    want = samples(25)
    p = write_shard(tmp_path / "a.tar", want)
    got = read_all(TarReader(block_bytes=4096), closed_queue(p))
    assert [k for k, _ in got] == [f"{p}:{key}".encode() for key, _ in want]
    assert [v for _, v in got] == [f for _, f in want]


def test_field_blocks_feed_decoders_without_copies(tmp_path: Path) -> None:
    want = samples(10)
    p = write_shard(tmp_path / "a.tar", want)
    block = TarReader().read_block(closed_queue(p), 10)
    jpg = block["jpg"]
    assert jpg.data is block.data  # the read buffer, not a copy
    assert jpg.values().tolist() == [f["jpg"] for _, f in want]
    np.testing.assert_array_equal(jpg.key_ids, np.arange(10))
    assert block["cls"].values().tolist() == [f["cls"] for _, f in want]
    with pytest.raises(KeyError, match="no field 'png'"):
        block["png"]


def test_fields_select_members_and_long_names(tmp_path: Path) -> None:
    long_key = "d" * 150 + "/" + "k" * 120
    want = [(long_key, {"jpg": b"x" * 700, "json": b"{}", "cls": b"1"}),
            ("short", {"jpg": b"y", "json": b"[]", "cls": b"2"})]
    for fmt in (tarfile.GNU_FORMAT, tarfile.PAX_FORMAT):
        d = tarfile.TarInfo("somedir")
        d.type = tarfile.DIRTYPE
        p = write_shard(tmp_path / f"{fmt}.tar", want, fmt=fmt, extra=[d])
        got = read_all(TarReader(fields=("JPG", "cls")), closed_queue(p))
        assert [k for k, _ in got] == [f"{p}:{long_key}".encode(), f"{p}:short".encode()]
        assert [v for _, v in got] == [{"jpg": b"x" * 700, "cls": b"1"}, {"jpg": b"y", "cls": b"2"}]


def test_gzip_shards(tmp_path: Path) -> None:
    want = samples(12)
    raw = write_shard(tmp_path / "a.tar", want).read_bytes()
    p = tmp_path / "a.tar.gz"
    p.write_bytes(gzip.compress(raw))
    got = read_all(TarReader(compression="GZIP"), closed_queue(p))
    assert [v for _, v in got] == [f for _, f in want]


@pytest.mark.parametrize("stop", [0, 1, 6, 13, 19])
def test_state_dict_resumes_at_the_next_sample(tmp_path: Path, stop: int) -> None:
    paths = [write_shard(tmp_path / "a.tar", samples(10)),
             write_shard(tmp_path / "b.tar", samples(10, 10))]
    full = read_all(TarReader(block_bytes=2048), closed_queue(*paths), n=3)
    q = closed_queue(*paths)
    r = TarReader(block_bytes=2048)
    got = []
    while len(got) < stop:
        b = r.read_block(q, 1)
        got += list(zip(b.keys().tolist(), b.values().tolist()))
    state = r.state_dict()
    r2 = TarReader(block_bytes=2048)
    r2.load_state_dict(state)
    got += read_all(r2, q, n=3)
    assert got == full
    assert r2.num_records_produced() == 20


def test_two_readers_on_one_queue_read_each_sample_once(tmp_path: Path) -> None:
    paths = [write_shard(tmp_path / f"s{i}.tar", samples(9, 9 * i)) for i in range(6)]
    q = closed_queue(*paths)
    results: dict[int, list] = {}

    def run(i: int) -> None:
        results[i] = read_all(TarReader(block_bytes=1024), q, n=4)

    threads = [threading.Thread(target=run, args=(i,), name=f"feedq-test-tar-{i}") for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(15)
        assert not t.is_alive()
    keys = sorted(k for r in results.values() for k, _ in r)
    assert keys == sorted(f"{p}:{k}".encode() for i, p in enumerate(paths) for k, _ in samples(9, 9 * i))


def test_bad_checksum_after_good_samples(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    p = write_shard(tmp_path / "a.tar", samples(6))
    data = bytearray(p.read_bytes())
    # corrupt the header of sample 3's first member
    off = 0
    for _ in range(6):
        size = int(data[off + 124 : off + 135].decode().strip() or "0", 8)
        off += 512 + -(-size // 512) * 512
    bad_at = off
    data[bad_at + 10] ^= 0xFF
    p.write_bytes(bytes(data))
    r = TarReader()
    q = closed_queue(p, write_shard(tmp_path / "b.tar", samples(2, 100)))
    first = r.read_block(q, 10)
    assert len(first) == 3
    with pytest.raises(DataLossError, match=rf"^{p}: bad tar header checksum at offset {bad_at} \(is this a tar file\?\)$"):
        r.read_block(q, 10)
    assert len(r.read_block(q, 10)) == 2  # the next shard
    skip = TarReader(on_error="skip")
    got = read_all(skip, closed_queue(p))
    assert len(got) == 3 and skip.num_errors_skipped() == 1


def test_truncated_member_and_header(tmp_path: Path) -> None:
    p = write_shard(tmp_path / "a.tar", samples(4))
    raw = p.read_bytes()
    cut = tmp_path / "cut.tar"
    with tarfile.open(p) as t:
        last_jpg = [m for m in t.getmembers() if m.name.endswith(".jpg")][-1]
    cut.write_bytes(raw[: last_jpg.offset_data + last_jpg.size // 2])  # into the last image
    got = []
    r = TarReader()
    q = closed_queue(cut)
    with pytest.raises(DataLossError, match=r"truncated tar (member|header) at offset \d+"):
        while True:
            b = r.read_block(q, 10)
            got += b.keys().tolist()
    assert len(got) == 3  # the whole samples before the cut
    half = tmp_path / "half.tar"
    half.write_bytes(raw[:700])
    with pytest.raises(DataLossError, match=r"truncated tar (member|header)"):
        TarReader().read_block(closed_queue(half), 10)


def test_sample_missing_a_field_is_skipped_alone(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    want = samples(5)
    broken = [*want[:2], ("c9/odd", {"jpg": b"only"}), *want[2:]]
    p = write_shard(tmp_path / "a.tar", broken)
    with pytest.raises(DataLossError, match=rf"^{p}: sample 'c9/odd' at offset \d+ lacks field\(s\) \['cls'\]$"):
        read_all(TarReader(), closed_queue(p))
    caplog.set_level(logging.WARNING, "feedq.readers")
    r = TarReader(on_error="skip", block_bytes=1024)
    got = read_all(r, closed_queue(p), n=2)
    assert [v for _, v in got] == [f for _, f in want]
    assert r.num_errors_skipped() == 1
    assert any("lacks field" in rec.message for rec in caplog.records)


def test_not_a_tar_file(tmp_path: Path) -> None:
    p = tmp_path / "x.tar"
    p.write_bytes(b"hello world" * 100)
    with pytest.raises(DataLossError, match=r"bad tar header checksum at offset 0"):
        TarReader().read_block(closed_queue(p), 1)
    empty = tmp_path / "empty.tar"
    empty.write_bytes(b"")
    q = closed_queue(empty)
    with pytest.raises(OutOfRangeError):
        TarReader().read_block(q, 1)
