"""Readers and decoders: files -> decoded NumPy batches, beside the alternatives.

Measures records/s and MB/s (of file bytes) for each workload, median of
``--repeats`` runs after one warm-up, with baselines measured in the same run:

* raw: reading the same file bytes (the I/O limit);
* CSV (8 float32 + 1 int label): ``pyarrow.csv.read_csv`` on the file;
* fixed-length 132-byte records: ``np.frombuffer`` on the file bytes;
* TFRecord Examples {x: 32 floats, label: int64}, plain and GZIP: the
  ``tfrecord`` package's reader (when installed), plain gunzip of the file;
* variable-length Int64List features padded into dense batches;
* tf.data (when TensorFlow is installed): TextLineDataset+decode_csv,
  CsvDataset, FixedLengthRecordDataset+decode_raw, TFRecordDataset+
  parse_example, all batched by 256 and prefetched.

feedq reads with ``read_block`` (one buffer per block, <= block_bytes) and
decodes each block in one call, then hands out batches of 256 (views).

Usage::

    python benchmarks/readers.py --records 200000 --repeats 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from feedq.errors import OutOfRangeError
from feedq.queues import FIFOQueue
from feedq.readers import (
    FixedLenFeature,
    FixedLengthRecordReader,
    FixedLenSequenceFeature,
    TextLineReader,
    TFRecordReader,
    TFRecordWriter,
    decode_csv,
    decode_raw,
    parse_example,
    serialize_example,
)
from feedq.readers._crc import crc32c_function, mask_crc_array

BATCH = 256
BLOCK_RECORDS = 1 << 20  # records asked per read_block: block_bytes (4 MiB) is the real bound
SLOW_BASELINE_CAP = 50_000  # records given to baselines slower than ~0.1 M/s


# ----------------------------------------------------------------------------- data
def make_csv(path: Path, n: int, rng: np.random.Generator) -> None:
    import pyarrow as pa
    import pyarrow.csv as pcsv

    cols = {f"f{i}": rng.standard_normal(n).astype(np.float32) for i in range(8)}
    cols["label"] = rng.integers(0, 10, n).astype(np.int32)
    pcsv.write_csv(pa.table(cols), path, pcsv.WriteOptions(include_header=False))


def frame_records(recs: np.ndarray) -> bytes:
    """TFRecord framing of N equal-length records, vectorised (crc per record in C)."""
    n, length = recs.shape
    crc = crc32c_function()
    head = np.frombuffer(np.uint64(length).tobytes(), dtype=np.uint8)
    hcrc = mask_crc_array(np.array([crc(head.tobytes())], dtype=np.uint32)).view(np.uint8)
    flat = recs.tobytes()
    mv = memoryview(flat)
    dcrc = mask_crc_array(
        np.fromiter((crc(mv[i * length : (i + 1) * length]) for i in range(n)), np.uint32, n)
    )
    out = np.empty((n, 16 + length), dtype=np.uint8)
    out[:, :8] = head
    out[:, 8:12] = hcrc
    out[:, 12 : 12 + length] = recs
    out[:, 12 + length :] = dcrc.view(np.uint8).reshape(n, 4)
    return out.tobytes()


def make_examples(path: Path, n: int, rng: np.random.Generator) -> None:
    # One serialized template, values patched in with NumPy: the same bytes
    # protobuf would write (checked by parsing the first records back).
    marker = np.arange(1, 33, dtype=np.float32)
    t1 = serialize_example({"x": marker, "label": 3})
    t2 = serialize_example({"x": marker, "label": 4})
    xo = t1.find(marker.tobytes())
    lo = next(i for i, (a, b) in enumerate(zip(t1, t2)) if a != b)
    recs = np.tile(np.frombuffer(t1, dtype=np.uint8), (n, 1))
    x = rng.standard_normal((n, 32)).astype(np.float32)
    recs[:, xo : xo + 128] = x.view(np.uint8)
    recs[:, lo] = rng.integers(0, 10, n).astype(np.uint8)
    path.write_bytes(frame_records(recs))


def make_varlen(path: Path, n: int, rng: np.random.Generator) -> None:
    lens = rng.integers(1, 21, n)
    vals = rng.integers(0, 1000, int(lens.sum()))
    offs = np.concatenate([[0], np.cumsum(lens)])
    with TFRecordWriter(path) as w:
        w.write_many(serialize_example({"ids": vals[offs[i] : offs[i + 1]]}) for i in range(n))


def gzip_file(src: Path, dst: Path) -> None:
    comp = zlib.compressobj(6, zlib.DEFLATED, 31)
    with open(src, "rb") as f, open(dst, "wb") as g:
        while chunk := f.read(1 << 22):
            g.write(comp.compress(chunk))
        g.write(comp.flush())


# ----------------------------------------------------------------------------- runners
def queue_of(path: Path) -> FIFOQueue:
    q = FIFOQueue(capacity=-1, dtypes=["string"], shapes=[[]])
    q.enqueue_many([[str(path)]])
    q.close()
    return q


MAX_BLOCK = [0]


def feedq_blocks(reader: Any, path: Path, decode: Callable[[Any], Any]) -> int:
    """Read a file block by block, decode each block, cut it into batches of 256."""
    q = queue_of(path)
    n = 0
    with reader:
        while True:
            try:
                block = reader.read_block(q, BLOCK_RECORDS)
            except OutOfRangeError:
                return n
            MAX_BLOCK[0] = max(MAX_BLOCK[0], len(block.data))
            cols = decode(block)
            k = len(block)
            for s in range(0, k, BATCH):
                _batch = [c[s : s + BATCH] for c in cols]
            n += k


def raw_read(path: Path) -> int:
    with open(path, "rb", buffering=0) as f:
        while f.read(1 << 22):
            pass
    return 0


def gunzip(path: Path) -> int:
    d = zlib.decompressobj(31)
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            while chunk:
                d.decompress(chunk, 1 << 22)
                chunk = d.unconsumed_tail
    return 0


def tfrecord_package(path: Path, cap: int) -> tuple[float, int]:
    """Time the `tfrecord` package's reader in a subprocess.

    Its generated protos clash with TensorFlow's in protobuf's default pool
    when both are imported in one process, so it runs alone.
    """
    import subprocess

    code = f"""
import time
try:
    from tfrecord.reader import tfrecord_loader
except ImportError:
    print("0 0"); raise SystemExit
def run():
    k = 0
    for _rec in tfrecord_loader({str(path)!r}, None, {{"x": "float", "label": "int"}}):
        k += 1
        if k >= {cap}:
            break
    return k
run()
t = time.perf_counter(); k = run(); print(time.perf_counter() - t, k)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    try:
        t, k = out.stdout.split()
        return float(t), int(k)
    except ValueError:
        return 1.0, 0


def time_it(fn: Callable[[], int], repeats: int) -> tuple[float, int]:
    fn()  # warm-up (page cache, imports)
    times, count = [], 0
    for _ in range(repeats):
        t = time.perf_counter()
        count = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), count


ROWS: list[tuple[str, str, float, float, str]] = []


def report(workload: str, system: str, seconds: float, records: int, nbytes: int, note: str = "") -> None:
    rps = records / seconds if records else float("nan")
    mbs = nbytes / seconds / 1e6
    ROWS.append((workload, system, rps, mbs, note))
    print(f"{workload:<22} {system:<44} {rps / 1e6:8.2f} M rec/s {mbs:8.0f} MB/s  {note}", flush=True)


# ----------------------------------------------------------------------------- main
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--no-tf", action="store_true", help="skip tf.data baselines")
    ap.add_argument("--only", default="csv,fixed,tfrecord,gzip,varlen")
    args = ap.parse_args()
    n, reps = args.records, args.repeats
    only = set(args.only.split(","))
    rng = np.random.default_rng(0)
    tf = None
    if not args.no_tf:
        try:
            os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
            import tensorflow as tf  # type: ignore[no-redef]
        except ImportError:
            tf = None
    print(f"# python {' '.join(sys.argv)}  (records={n}, repeats={reps}, batch={BATCH}, cpus={os.cpu_count()})")
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        if "csv" in only:
            p = d / "data.csv"
            make_csv(p, n, rng)
            size = p.stat().st_size
            defaults = [[0.0]] * 8 + [[0]]
            t, _ = time_it(lambda: raw_read(p), reps)
            report("CSV 8f+1i", "raw read of the bytes", t, n, size)

            def arrow() -> int:
                import pyarrow.csv as pcsv

                return pcsv.read_csv(p, read_options=pcsv.ReadOptions(autogenerate_column_names=True)).num_rows

            t, _ = time_it(arrow, reps)
            report("CSV 8f+1i", "pyarrow.csv.read_csv (whole file)", t, n, size)
            MAX_BLOCK[0] = 0
            t, c = time_it(lambda: feedq_blocks(TextLineReader(), p, lambda b: decode_csv(b, defaults)), reps)
            report("CSV 8f+1i", "feedq TextLineReader.read_block+decode_csv", t, c, size, f"max block {MAX_BLOCK[0] >> 20} MiB")
            if tf is not None:
                def tf_lines() -> int:
                    ds = tf.data.TextLineDataset(str(p)).batch(BATCH).map(
                        lambda x: tf.io.decode_csv(x, defaults), num_parallel_calls=tf.data.AUTOTUNE).prefetch(4)
                    return sum(int(b[0].shape[0]) for b in ds)

                t, c = time_it(tf_lines, reps)
                report("CSV 8f+1i", "tf.data TextLineDataset+decode_csv", t, c, size)

                def tf_csv() -> int:
                    ds = tf.data.experimental.CsvDataset(str(p), [tf.float32] * 8 + [tf.int32]).batch(BATCH).prefetch(4)
                    return sum(int(b[0].shape[0]) for b in ds)

                t, c = time_it(tf_csv, reps)
                report("CSV 8f+1i", "tf.data CsvDataset", t, c, size)

        if "fixed" in only:
            p = d / "data.bin"
            p.write_bytes(rng.integers(0, 256, n * 132, dtype=np.uint8).tobytes())
            size = p.stat().st_size
            t, _ = time_it(lambda: raw_read(p), reps)
            report("fixed 132 B", "raw read of the bytes", t, n, size)

            def frombuffer() -> int:
                return np.frombuffer(p.read_bytes(), dtype="<f4").reshape(-1, 33).shape[0]

            t, c = time_it(frombuffer, reps)
            report("fixed 132 B", "np.frombuffer on the whole file", t, c, size)
            MAX_BLOCK[0] = 0
            t, c = time_it(lambda: feedq_blocks(FixedLengthRecordReader(132), p,
                                                lambda b: [decode_raw(b, np.float32)]), reps)
            report("fixed 132 B", "feedq FixedLengthRecordReader+decode_raw", t, c, size, f"max block {MAX_BLOCK[0] >> 20} MiB")
            if tf is not None:
                def tf_fixed() -> int:
                    ds = tf.data.FixedLengthRecordDataset(str(p), 132).batch(BATCH).map(
                        lambda x: tf.io.decode_raw(x, tf.float32), num_parallel_calls=tf.data.AUTOTUNE).prefetch(4)
                    return sum(int(b.shape[0]) for b in ds)

                t, c = time_it(tf_fixed, reps)
                report("fixed 132 B", "tf.data FixedLengthRecordDataset+decode_raw", t, c, size)

        feats = {"x": FixedLenFeature([32], np.float32), "label": FixedLenFeature([], np.int64)}
        plain = d / "ex.tfr"
        if {"tfrecord", "gzip"} & only:
            make_examples(plain, n, rng)
        if "tfrecord" in only:
            size = plain.stat().st_size
            t, _ = time_it(lambda: raw_read(plain), reps)
            report("TFRecord Example", "raw read of the bytes", t, n, size)
            MAX_BLOCK[0] = 0
            t, c = time_it(lambda: feedq_blocks(TFRecordReader(), plain,
                                                lambda b: list(parse_example(b, feats).values())), reps)
            report("TFRecord Example", "feedq TFRecordReader+parse_example", t, c, size, f"max block {MAX_BLOCK[0] >> 20} MiB")
            t, c = tfrecord_package(plain, min(n, SLOW_BASELINE_CAP))
            if c:
                report("TFRecord Example", "tfrecord package tfrecord_loader", t, c, size * c // n,
                       f"first {c} records")
            if tf is not None:
                tf_feats = {"x": tf.io.FixedLenFeature([32], tf.float32), "label": tf.io.FixedLenFeature([], tf.int64)}

                def tf_ex() -> int:
                    ds = tf.data.TFRecordDataset(str(plain)).batch(BATCH).map(
                        lambda x: tf.io.parse_example(x, tf_feats), num_parallel_calls=tf.data.AUTOTUNE).prefetch(4)
                    return sum(int(b["label"].shape[0]) for b in ds)

                t, c = time_it(tf_ex, reps)
                report("TFRecord Example", "tf.data TFRecordDataset+parse_example", t, c, size)

        if "gzip" in only:
            gz = d / "ex.tfr.gz"
            gzip_file(plain, gz)
            size = gz.stat().st_size
            t, _ = time_it(lambda: gunzip(gz), reps)
            report("TFRecord GZIP", "plain gunzip (zlib) of the file", t, n, size)
            MAX_BLOCK[0] = 0
            t, c = time_it(lambda: feedq_blocks(TFRecordReader(options="GZIP"), gz,
                                                lambda b: list(parse_example(b, feats).values())), reps)
            report("TFRecord GZIP", "feedq TFRecordReader(GZIP)+parse_example", t, c, size, f"max block {MAX_BLOCK[0] >> 20} MiB")
            if tf is not None:
                tf_feats = {"x": tf.io.FixedLenFeature([32], tf.float32), "label": tf.io.FixedLenFeature([], tf.int64)}

                def tf_gz() -> int:
                    ds = tf.data.TFRecordDataset(str(gz), compression_type="GZIP").batch(BATCH).map(
                        lambda x: tf.io.parse_example(x, tf_feats), num_parallel_calls=tf.data.AUTOTUNE).prefetch(4)
                    return sum(int(b["label"].shape[0]) for b in ds)

                t, c = time_it(tf_gz, reps)
                report("TFRecord GZIP", "tf.data TFRecordDataset(GZIP)+parse_example", t, c, size)

        if "varlen" in only:
            vp = d / "varlen.tfr"
            make_varlen(vp, n, rng)
            size = vp.stat().st_size
            vfeats = {"ids": FixedLenSequenceFeature([], np.int64, allow_missing=True)}
            MAX_BLOCK[0] = 0
            t, c = time_it(lambda: feedq_blocks(TFRecordReader(), vp,
                                                lambda b: list(parse_example(b, vfeats).values())), reps)
            report("VarLen Int64List", "feedq TFRecordReader+parse_example (padded)", t, c, size, f"max block {MAX_BLOCK[0] >> 20} MiB")
            if tf is not None:
                tf_v = {"ids": tf.io.FixedLenSequenceFeature([], tf.int64, allow_missing=True)}

                def tf_var() -> int:
                    ds = tf.data.TFRecordDataset(str(vp)).batch(BATCH).map(
                        lambda x: tf.io.parse_example(x, tf_v), num_parallel_calls=tf.data.AUTOTUNE).prefetch(4)
                    return sum(int(b["ids"].shape[0]) for b in ds)

                t, c = time_it(tf_var, reps)
                report("VarLen Int64List", "tf.data TFRecordDataset+parse_example", t, c, size)

    print("\n| workload | system | M records/s | MB/s | note |\n| --- | --- | ---: | ---: | --- |")
    for w, s, r, m, note in ROWS:
        print(f"| {w} | {s} | {r / 1e6:.2f} | {m:.0f} | {note} |")


if __name__ == "__main__":
    main()
