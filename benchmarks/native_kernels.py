"""feedq._native kernels on variable-length Examples, beside what they replace.

Data: a TFRecord file of N variable-length Examples {x: 32 floats, label:
int64 0..999, ids: Int64List of 0..20 values, tag: a short BytesList}.

* framing + CRC (records/s): ``scan_tfrecords`` of the native core (in one
  and two threads) and of its Python twin, and the Python framing loop
  TFRecordReader used before the native core (copied below as the baseline),
  each over the file cut into the reader's 4 MiB blocks;
* TFRecordReader.read_block over the file with each core's framing;
* Example parsing (records/s), block by block: ``parse_examples`` (native, in
  one and two threads; the twin on one block) into the four columns, beside
  ``feedq.parse_example`` on the reader's blocks (FixedLenFeature x, label;
  VarLenFeature ids, tag) on its two paths: the kernel (the default with the
  native core) and the NumPy walker + protobuf (without it); and ids padded
  (FixedLenSequenceFeature) on both paths.

Rates are medians of ``--repeats`` runs after one warm-up, in wall-clock and
in CPU time of this process (steadier on a shared machine); all baselines are
measured in the same run.

Usage::

    python setup.py build_ext --inplace
    python benchmarks/native_kernels.py --records 1000000 --repeats 3
"""

from __future__ import annotations

import argparse
import statistics
import struct
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import feedq._native as nat
import feedq.readers._example as example_mod
from benchmarks._util import header, table
from feedq.errors import OutOfRangeError
from feedq.queues import FIFOQueue
from feedq.readers import (
    FixedLenFeature,
    FixedLenSequenceFeature,
    TFRecordReader,
    TFRecordWriter,
    VarLenFeature,
    parse_example,
)
from feedq.readers._example_pb import example_class

BLOCK = 4 << 20


# ----------------------------------------------------------------------------- data
def _v(n: int) -> bytes:
    out = bytearray()
    while n >= 128:
        out.append((n & 127) | 128)
        n >>= 7
    out.append(n)
    return bytes(out)


def _ld(field: int, body: bytes) -> bytes:
    return bytes([(field << 3) | 2]) + _v(len(body)) + body


def _entry(key: bytes, feature: bytes) -> bytes:
    return _ld(1, _ld(1, key) + _ld(2, feature))


def encode(x: np.ndarray, label: int, ids: list[int], tag: bytes) -> bytes:
    """One serialized Example (protobuf's wire format; checked against protobuf)."""
    return _ld(
        1,
        _entry(b"x", _ld(2, _ld(1, x.tobytes())))
        + _entry(b"label", _ld(3, _ld(1, _v(label))))
        + _entry(b"ids", _ld(3, _ld(1, b"".join(_v(i) for i in ids))))
        + _entry(b"tag", _ld(1, _ld(1, tag))),
    )


def make_file(path: Path, n: int, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    xs = rng.standard_normal((n, 32)).astype(np.float32)
    labels = rng.integers(0, 1000, n).tolist()
    counts = rng.integers(0, 21, n)
    ids = rng.integers(0, 100_000, int(counts.sum())).tolist()
    tags = rng.integers(0, 10**6, n).tolist()
    cls = example_class()
    with TFRecordWriter(path) as w:
        at = 0
        chunk: list[bytes] = []
        for i in range(n):
            c = int(counts[i])
            chunk.append(encode(xs[i], labels[i], ids[at : at + c], b"t%d" % tags[i]))
            at += c
            if i < 3:
                ex = cls.FromString(chunk[-1])  # the encoder writes what protobuf reads
                assert list(ex.features.feature["ids"].int64_list.value) == ids[at - c : at]
            if len(chunk) == 20_000:
                w.write_many(chunk)
                chunk = []
        w.write_many(chunk)


def blocks_of(data: bytes) -> list[bytes]:
    """The file cut at record boundaries into ~4 MiB blocks, as the reader buffers it."""
    scan = nat.scan_tfrecords(data)
    assert scan.status == nat.SCAN_OK and scan.stop == len(data)
    ends = scan.starts + 16 + scan.lengths
    out, a, i = [], 0, 0
    while i < len(ends):
        k = max(int(np.searchsorted(ends, a + BLOCK, side="right")), i + 1)
        b = int(ends[k - 1])
        out.append(data[a:b])
        a, i = b, k
    return out


# ------------------------------------------- the framing loop before the native core
_HEADER, _FOOTER = 12, 4
_AR12 = np.arange(_HEADER, dtype=np.int64)
_AR4 = np.arange(4, dtype=np.int64)


def _old_scan(data: bytes, u8: np.ndarray, pos: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    end = len(data)
    chunks_s: list[np.ndarray] = []
    chunks_l: list[np.ndarray] = []
    small_s: list[int] = []
    small_l: list[int] = []
    s_append, l_append = small_s.append, small_l.append
    count = 0
    prev, same = -1, 0
    unpack = struct.unpack_from
    while count < n and end - pos >= _HEADER:
        (length,) = unpack("<Q", data, pos)
        rec = length + (_HEADER + _FOOTER)
        if pos + rec > end:
            break
        if length == prev:
            same += 1
        else:
            prev, same = length, 0
        s_append(pos)
        l_append(length)
        count += 1
        pos += rec
        if same >= 3 and count < n:
            limit = min(n - count, (end - pos) // rec)
            ref = u8[pos - rec : pos - rec + _HEADER]
            run, window = 0, 64
            while run < limit:
                k = min(window, limit - run)
                at = pos + rec * np.arange(run, run + k, dtype=np.int64)
                ok = np.all(u8[at[:, None] + _AR12] == ref, axis=1)
                if ok.all():
                    run += k
                    window *= 4
                else:
                    run += int(np.argmin(ok))
                    break
            if run:
                chunks_s.append(np.array(small_s, dtype=np.int64))
                chunks_l.append(np.array(small_l, dtype=np.int64))
                small_s.clear()
                small_l.clear()
                chunks_s.append(pos + rec * np.arange(run, dtype=np.int64))
                chunks_l.append(np.full(run, length, dtype=np.int64))
                count += run
                pos += rec * run
            same = 0
    if small_s or not chunks_s:
        chunks_s.append(np.array(small_s, dtype=np.int64))
        chunks_l.append(np.array(small_l, dtype=np.int64))
    if len(chunks_s) == 1:
        return chunks_s[0], chunks_l[0]
    return np.concatenate(chunks_s), np.concatenate(chunks_l)


def _gather_u32(u8: np.ndarray, at: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(u8[at[:, None] + _AR4]).view("<u4")[:, 0]


def _crc_table() -> np.ndarray:
    table = np.zeros(256, dtype=np.uint32)
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table[i] = c
    return table


_CRC_TABLE = _crc_table()


def mask_crc_array(crcs: np.ndarray) -> np.ndarray:
    """TFRecord's CRC mask over an array of raw CRC32C values (the old Python path's)."""
    c = crcs.astype(np.uint32, copy=False)
    return ((c >> np.uint32(15)) | (c << np.uint32(17))) + np.uint32(0xA282EAD8)


def crc32c_function() -> Any:
    """The old Python path's per-record CRC32C: the ``crc32c`` package (the
    test extra), else the native core's."""
    try:
        import crc32c
    except ImportError:
        return nat.crc32c
    return crc32c.crc32c


def _masked_crc8(u8: np.ndarray, at: np.ndarray) -> np.ndarray:
    if len(at) == 0:
        return np.zeros(0, dtype=np.uint32)
    b = u8[at[:, None] + np.arange(8)]
    crc = np.full(len(at), 0xFFFFFFFF, dtype=np.uint32)
    for j in range(8):
        crc = _CRC_TABLE[(crc ^ b[:, j]) & 0xFF] ^ (crc >> np.uint32(8))
    return mask_crc_array(crc ^ np.uint32(0xFFFFFFFF))


def old_framing(data: bytes, n: int = 1 << 20, max_record_bytes: int = 1 << 30) -> int:
    """TFRecordReader's framing before the native core: records found and checked."""
    u8 = np.frombuffer(data, dtype=np.uint8)
    starts, lengths = _old_scan(data, u8, 0, n)
    k = len(starts)
    stored = _gather_u32(u8, starts + 8)
    if k and np.all(lengths == lengths[0]) and np.all(stored == stored[0]):
        one = _masked_crc8(u8, starts[:1])[0]
        hbad = np.arange(k) if one != stored[0] else np.zeros(0, dtype=np.int64)
    else:
        hbad = np.flatnonzero(_masked_crc8(u8, starts) != stored)
    kh = int(hbad[0]) if hbad.size else k
    big = np.flatnonzero(lengths[:kh] > max_record_bytes)
    kh = min(kh, int(big[0])) if big.size else kh
    mv = memoryview(data)
    crc = crc32c_function()
    dstart = starts[:kh] + _HEADER
    got = np.fromiter(
        (crc(mv[a:b]) for a, b in zip(dstart.tolist(), (dstart + lengths[:kh]).tolist())),
        dtype=np.uint32,
        count=kh,
    )
    dbad = np.flatnonzero(mask_crc_array(got) != _gather_u32(u8, dstart + lengths[:kh]))
    kd = int(dbad[0]) if dbad.size else kh
    return min(kd, kh)


# ----------------------------------------------------------------------------- timing
def rates(units: int, body: Callable[[], Any], repeats: int) -> tuple[float, float, list[float]]:
    """(median wall rate, median CPU rate, wall rates) over repeats, after a warm-up."""
    body()
    wall, cpu = [], []
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        body()
        t1, c1 = time.perf_counter(), time.process_time()
        wall.append(units / (t1 - t0))
        cpu.append(units / max(c1 - c0, 1e-9))
    return statistics.median(wall), statistics.median(cpu), wall


def fmt(r: float) -> str:
    return f"{r / 1e6:.3f} M"


def queue_of(path: Path) -> FIFOQueue:
    q = FIFOQueue(capacity=-1, dtypes=["string"], shapes=[[]])
    q.enqueue_many([[str(path)]])
    q.close()
    return q


def read_file(path: Path, decode: Callable[[Any], Any] | None = None) -> int:
    n = 0
    with TFRecordReader() as r:
        q = queue_of(path)
        while True:
            try:
                block = r.read_block(q, 1 << 20)
            except OutOfRangeError:
                return n
            if decode is not None:
                decode(block)
            n += len(block)


FEATURES = [
    nat.FeatureRequest(b"x", nat.KIND_FLOAT, 32),
    nat.FeatureRequest(b"label", nat.KIND_INT64, 1),
    nat.FeatureRequest(b"ids", nat.KIND_INT64),
    nat.FeatureRequest(b"tag", nat.KIND_BYTES),
]
PARSE_SPEC = {
    "x": FixedLenFeature([32], np.float32),
    "label": FixedLenFeature([], np.int64),
    "ids": VarLenFeature(np.int64),
    "tag": VarLenFeature(np.str_),
}
PADDED_SPEC = {
    "ids": FixedLenSequenceFeature([], np.int64, allow_missing=True),
    "label": FixedLenFeature([], np.int64),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--path", type=Path, help="reuse/keep the data file here")
    ap.add_argument("--slow-cap", type=int, default=200_000,
                    help="records given to parse_example today (the twin parser gets one block)")
    args = ap.parse_args()
    header("feedq._native kernels, variable-length Examples")
    print(f"# core in use: {nat.CORE}; native built: {nat.NATIVE is not None}"
          + (f" (crc: {nat.NATIVE.backend.crc_implementation()})" if nat.NATIVE else ""))
    if nat.NATIVE is None:
        raise SystemExit("build the extension first: python setup.py build_ext --inplace")
    native, pure = nat.NATIVE, nat.PURE
    with tempfile.TemporaryDirectory() as tmp:
        path = args.path or Path(tmp) / "varlen.tfrecord"
        if not path.exists():
            t = time.perf_counter()
            make_file(path, args.records)
            print(f"# wrote {path} in {time.perf_counter() - t:.1f} s")
        data = path.read_bytes()
        blocks = blocks_of(data)
        scan = native.scan_tfrecords(data)
        N = len(scan.starts)
        lens = scan.lengths
        print(f"# {N} records, {len(data) / 1e6:.1f} MB, record length {int(lens.min())}..{int(lens.max())} "
              f"(mean {lens.mean():.0f}), {len(blocks)} blocks of <= 4 MiB; {args.repeats} repeats")

        scans = [native.scan_tfrecords(b) for b in blocks]
        pool = ThreadPoolExecutor(2, thread_name_prefix="feedq-bench")

        def frame_with(k: nat.Kernels) -> Callable[[], None]:
            def run() -> None:
                assert sum(len(k.scan_tfrecords(b).starts) for b in blocks) == N
            return run

        def frame_2threads() -> None:
            assert sum(pool.map(lambda b: len(native.scan_tfrecords(b).starts), blocks)) == N

        def frame_old() -> None:
            assert sum(old_framing(b) for b in blocks) == N

        rows = []
        for name, body in (("native scan_tfrecords", frame_with(native)),
                           ("native scan_tfrecords, 2 threads", frame_2threads),
                           ("Python twin scan_tfrecords", frame_with(pure)),
                           ("old Python framing loop (before)", frame_old)):
            w, c, all_w = rates(N, body, args.repeats)
            rows.append((name, fmt(w), fmt(c), " ".join(f"{x / 1e6:.2f}" for x in all_w)))
        for name, k in (("native", native), ("twin", pure)):
            saved = nat.scan_tfrecords
            nat.scan_tfrecords = k.scan_tfrecords  # what TFRecordReader calls
            try:
                w, c, all_w = rates(N, lambda: read_file(path), args.repeats)
            finally:
                nat.scan_tfrecords = saved
            rows.append((f"TFRecordReader.read_block, {name} framing", fmt(w), fmt(c),
                         " ".join(f"{x / 1e6:.2f}" for x in all_w)))
        print("\n## framing + CRC, per 4 MiB block (records/s)\n")
        print(table(rows, ["method", "median wall", "median CPU", "wall runs (M/s)"]))

        # --------------------------------------------------------------- parsing
        cap = min(N, args.slow_cap)
        res = native.parse_examples(data, scan.starts + 12, scan.lengths, FEATURES)
        assert res.error_index == -1
        recs = [data[s + 12 : s + 12 + n] for s, n in zip(scan.starts[:cap].tolist(), scan.lengths[:cap].tolist())]
        want = parse_example(recs, PARSE_SPEC)  # today's results agree with the kernel's
        assert want["x"].tobytes() == res.values[0][:cap].tobytes()
        assert want["ids"].values.tolist() == res.values[2][: int(res.splits[2][cap])].tolist()  # type: ignore[index]

        def parse_blocks(k: nat.Kernels, upto: int) -> Callable[[], None]:
            def run() -> None:
                for b, sc in zip(blocks[:upto], scans[:upto]):
                    k.parse_examples(b, sc.starts + 12, sc.lengths, FEATURES)
            return run

        def parse_2threads() -> None:
            list(pool.map(lambda bs: native.parse_examples(bs[0], bs[1].starts + 12, bs[1].lengths, FEATURES),
                          zip(blocks, scans)))

        # parse_example as the pipeline calls it: on the reader's blocks, on
        # the kernel's path and on the walker's (the path without the core)
        rb: list[Any] = []
        read_file(path, lambda b: rb.append(b) if sum(len(x) for x in rb) < cap else None)

        def parse_on(kernel: bool, spec: dict[str, Any]) -> Callable[[], None]:
            def run() -> None:
                saved = example_mod._KERNEL
                example_mod._KERNEL = kernel
                try:
                    for b in rb:
                        parse_example(b, spec)
                finally:
                    example_mod._KERNEL = saved
            return run

        n_today = sum(len(b) for b in rb)
        twin_blocks = 1
        n_twin = len(scans[0].starts)
        rows = []
        for name, units, body in (
            ("native parse_examples", N, parse_blocks(native, len(blocks))),
            ("native parse_examples, 2 threads", N, parse_2threads),
            ("Python twin parse_examples", n_twin, parse_blocks(pure, twin_blocks)),
            ("feedq.parse_example, kernel path", n_today, parse_on(True, PARSE_SPEC)),
            ("feedq.parse_example, walker + protobuf path", n_today, parse_on(False, PARSE_SPEC)),
            ("feedq.parse_example ids padded + label, kernel path", n_today, parse_on(True, PADDED_SPEC)),
            ("feedq.parse_example ids padded + label, walker path", n_today, parse_on(False, PADDED_SPEC)),
        ):
            w, c, all_w = rates(units, body, args.repeats)
            rows.append((name, units, fmt(w), fmt(c), " ".join(f"{x / 1e6:.3f}" for x in all_w)))
        pool.shutdown()
        print("\n## Example parsing per 4 MiB block into x[32] f32, label i64, ids var i64, "
              "tag var bytes (records/s)\n")
        print(table(rows, ["method", "records", "median wall", "median CPU", "wall runs (M/s)"]))
        if args.path is None:
            path.unlink()


if __name__ == "__main__":
    main()
