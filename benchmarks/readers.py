"""Readers and decoders on realistic files: files -> decoded batches of 256.

Each workload is 4 files holding ``--records`` records in all:

* ``tfrecord``: ``tf.train.Example`` {label: int64 0..999, x: 32 floats} in
  TensorFlow's field order (map entries by key, packed lists: the bytes
  ``SerializeToString(deterministic=True)`` writes, checked against protobuf
  and TensorFlow when installed); records vary in length (the label is a 1-
  or 2-byte varint). Parsed as FixedLenFeature x[32] float32, label int64.
* ``gzip``: the same files, GZIP-compressed.
* ``varlen``: ``feedq make-data --layout realistic`` Examples {ids: 0-20
  int64, label, tag, x}; ``ids`` parsed as a FixedLenSequenceFeature (padded
  per block, then padded per batch: ``dynamic_pad``), and label.
* ``csv``: ``feedq make-data --format csv --layout realistic``: id, 8 floats
  printed with 0-7 decimals, label; a header line.
* ``fixed``: 132-byte records (32 float32 + int32) decoded with decode_raw.

Systems, all measured in the same run, the repeats interleaved (one round
runs every system once) and the median reported:

* feedq pipeline, 2 readers and 1 reader: ``string_input_producer`` -> N
  reader threads, each ``read_block`` + one decode call per block ->
  ``batch_join(256, enqueue_many=True)`` -> a consumer loop over batches;
* feedq direct: one reader in the calling thread, ``read_block`` + decode,
  the block sliced into batches of 256 (no threads, no queues);
* TF1 queues: ``tf.compat.v1`` in a Graph + Session: ``string_input_producer``
  -> 2 readers ``read_up_to(4096)`` + ``parse_example`` / ``decode_csv`` /
  ``decode_raw`` -> ``batch_join(256, enqueue_many=True)`` -> ``sess.run``
  loop;
* tf.data: the files' dataset ``.batch(256).map(parse, AUTOTUNE).prefetch``;
* the reference each target names: plain gunzip of the files (zlib, one
  thread), ``pyarrow.csv.read_csv`` of the files, ``np.frombuffer`` of the
  files' bytes, and for ``varlen`` the NumPy pad ceiling (the rows already
  in memory as values + lengths, padded per batch by one NumPy scatter).

Targets of issue 12 are printed with ok / MISSED beside the table.

Usage::

    python benchmarks/readers.py                 # 1M records, 3 rounds
    python benchmarks/readers.py --quick         # 200k records, 3 rounds
    python benchmarks/readers.py --only tfrecord,gzip --data /tmp/feedq-bench
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import sys
import tempfile
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import feedq
from feedq import _native
from feedq.cli.datasets import _example, _float_feature, _int64_feature, make_dataset
from feedq.errors import OutOfRangeError
from feedq.queues import FIFOQueue
from feedq.readers import (
    FixedLenFeature,
    FixedLengthRecordReader,
    FixedLenSequenceFeature,
    TextLineReader,
    TFRecordReader,
    TFRecordWriter,
    VarLenFeature,
    decode_csv,
    decode_raw,
    parse_example,
)
from feedq.readers._example_pb import example_class

BATCH = 256
FILES = 4
BLOCK = 8192  # records per read_block in the pipeline (block_bytes, 4 MiB, bounds it too)
TF1_BLOCK = 4096  # records per read_up_to in the TF1 pipeline
DATA_VERSION = 1

WORKLOADS = ("tfrecord", "gzip", "varlen", "csv", "fixed")


# ----------------------------------------------------------------------------- data
def tf_order_examples(n: int, rng: np.random.Generator) -> list[bytes]:
    """Examples {label: 0..999, x: 32 floats} as TensorFlow serialises them
    deterministically (entries in key order, packed lists); vectorised from
    two templates (a 1- and a 2-byte label varint)."""
    label = rng.integers(0, 1000, n)
    x = rng.standard_normal((n, 32), dtype=np.float32).astype("<f4")
    marker = np.arange(1, 33, dtype="<f4").tobytes()
    out: list[bytes] = [b""] * n
    for small in (True, False):
        sel = np.flatnonzero(label < 128 if small else label >= 128)
        a, b = (1, 2) if small else (200, 201)
        t1 = _example([(b"label", _int64_feature([a])), (b"x", _float_feature(marker))])
        t2 = _example([(b"label", _int64_feature([b])), (b"x", _float_feature(marker))])
        lo = next(i for i, (u, w) in enumerate(zip(t1, t2)) if u != w)
        xo = t1.find(marker)
        recs = np.tile(np.frombuffer(t1, dtype=np.uint8), (len(sel), 1))
        recs[:, xo : xo + 128] = x[sel].view(np.uint8)
        lab = label[sel]
        if small:
            recs[:, lo] = lab
        else:
            recs[:, lo] = (lab & 127) | 128
            recs[:, lo + 1] = lab >> 7
        flat = recs.tobytes()
        width = len(t1)
        for j, i in enumerate(sel.tolist()):
            out[i] = flat[j * width : (j + 1) * width]
    # The bytes are what protobuf (and TensorFlow) write: check a sample.
    ex = example_class()()
    for i in range(min(n, 2000)):
        ex.ParseFromString(out[i])
        f = ex.features.feature
        assert f["label"].int64_list.value[0] == label[i], i
        assert np.array(f["x"].float_list.value, dtype=np.float32).tobytes() == x[i].tobytes(), i
        assert ex.SerializeToString(deterministic=True) == out[i], i
    tf = tf_module()
    if tf is not None:  # and what TensorFlow writes
        for i in range(min(n, 200)):
            assert tf.train.Example.FromString(out[i]).SerializeToString(deterministic=True) == out[i], i
    return out


def write_tfrecords(folder: Path, records: list[bytes], suffix: str = ".tfrecord") -> list[Path]:
    paths = []
    per = -(-len(records) // FILES)
    for k in range(FILES):
        p = folder / f"part-{k:05d}{suffix}"
        with TFRecordWriter(p) as w:
            w.write_many(records[k * per : (k + 1) * per])
        paths.append(p)
    return paths


def gzip_file(src: Path, dst: Path) -> None:
    comp = zlib.compressobj(6, zlib.DEFLATED, 31)
    with open(src, "rb") as f, open(dst, "wb") as g:
        while chunk := f.read(1 << 22):
            g.write(comp.compress(chunk))
        g.write(comp.flush())


def make_data(root: Path, n: int, only: set[str]) -> dict[str, list[Path]]:
    """The files of each workload under ``root`` (reused when already there)."""
    stamp = {"version": DATA_VERSION, "records": n, "files": FILES}
    manifest = root / "manifest.json"
    done: dict[str, Any] = {}
    if manifest.exists():
        done = json.loads(manifest.read_text())
        if done.get("stamp") != stamp:
            done = {}
    done["stamp"] = stamp
    out: dict[str, list[Path]] = {}
    rng = np.random.default_rng(0)

    def have(name: str) -> list[Path] | None:
        paths = [Path(p) for p in done.get(name, [])]
        return paths if paths and all(p.exists() for p in paths) else None

    need_tf = {"tfrecord", "gzip"} & only
    if need_tf:
        paths = have("tfrecord")
        if paths is None:
            d = root / "tfrecord"
            d.mkdir(parents=True, exist_ok=True)
            paths = write_tfrecords(d, tf_order_examples(n, rng))
        out["tfrecord"] = paths
        done["tfrecord"] = [str(p) for p in paths]
    if "gzip" in only:
        paths = have("gzip")
        if paths is None:
            d = root / "gzip"
            d.mkdir(parents=True, exist_ok=True)
            paths = []
            for src in out["tfrecord"]:
                dst = d / (src.name + ".gz")
                gzip_file(src, dst)
                paths.append(dst)
        out["gzip"] = paths
        done["gzip"] = [str(p) for p in paths]
    for name, fmt in (("varlen", "tfrecord"), ("csv", "csv")):
        if name not in only:
            continue
        paths = have(name)
        if paths is None:
            written = make_dataset(root / name, fmt, n, files=FILES, layout="realistic", overwrite=True)
            paths = [Path(p) for p in written]
        out[name] = paths
        done[name] = [str(p) for p in paths]
    if "fixed" in only:
        paths = have("fixed")
        if paths is None:
            d = root / "fixed"
            d.mkdir(parents=True, exist_ok=True)
            paths = []
            per = -(-n // FILES)
            for k in range(FILES):
                m = min(per, n - k * per)
                rec = np.zeros(m, dtype=[("x", "<f4", (32,)), ("label", "<i4")])
                rec["x"] = rng.random((m, 32), dtype=np.float32)
                rec["label"] = rng.integers(0, 1000, m)
                p = d / f"part-{k:05d}.bin"
                p.write_bytes(rec.tobytes())
                paths.append(p)
        out["fixed"] = paths
        done["fixed"] = [str(p) for p in paths]
    manifest.write_text(json.dumps(done))
    return out


# ----------------------------------------------------------------------------- workloads
CSV_DEFAULTS: list[list[Any]] = [[0]] + [[0.0]] * 8 + [[0]]


@dataclass
class Workload:
    """How feedq, TF1 and tf.data read one workload."""

    name: str
    paths: list[Path]
    make_reader: Callable[[], Any]
    decode: Callable[[Any], list[np.ndarray]]
    dtypes: list[Any]
    shapes: list[list[Any]]
    dynamic_pad: bool = False
    compression: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def file_bytes(self) -> int:
        return sum(p.stat().st_size for p in self.paths)


EX_FEATURES = {"label": FixedLenFeature([], np.int64), "x": FixedLenFeature([32], np.float32)}
VAR_FEATURES = {"ids": FixedLenSequenceFeature([], np.int64, allow_missing=True),
                "label": FixedLenFeature([], np.int64)}


def _parse(features: dict[str, Any], block: Any) -> list[np.ndarray]:
    out = parse_example(block, features)
    return [out[k] for k in sorted(features)]


def workloads(files: dict[str, list[Path]]) -> list[Workload]:
    out = []
    for name, paths in files.items():
        if name in ("tfrecord", "gzip"):
            comp = "GZIP" if name == "gzip" else ""
            out.append(Workload(name, paths, functools.partial(TFRecordReader, options=comp or None),
                                functools.partial(_parse, EX_FEATURES), [np.int64, np.float32], [[], [32]],
                                compression=comp))
        elif name == "varlen":
            out.append(Workload(name, paths, TFRecordReader, functools.partial(_parse, VAR_FEATURES),
                                [np.int64, np.int64], [[None], []], dynamic_pad=True))
        elif name == "csv":
            out.append(Workload(name, paths, functools.partial(TextLineReader, skip_header_lines=1),
                                lambda b: decode_csv(b, CSV_DEFAULTS),
                                [np.int32] + [np.float32] * 8 + [np.int32], [[]] * 10))
        elif name == "fixed":
            out.append(Workload(name, paths, functools.partial(FixedLengthRecordReader, 132),
                                lambda b: [decode_raw(b, np.float32)], [np.float32], [[33]]))
    return out


# ----------------------------------------------------------------------------- feedq
def feedq_pipeline(wl: Workload, readers: int, shuffle: bool = False) -> int:
    """string_input_producer -> ``readers`` threads (read_block + decode) ->
    batch_join(256, enqueue_many=True) -> this loop. Returns records seen.
    ``shuffle``: shuffle_batch_join instead (min_after_dequeue 10,000)."""
    n = 0
    with feedq.Pipeline() as pipe:
        files = feedq.string_input_producer([str(p) for p in wl.paths], num_epochs=1, shuffle=False)
        inputs = []
        for _ in range(readers):
            reader = pipe.closing(wl.make_reader())

            def read(reader: Any = reader) -> list[np.ndarray]:
                return wl.decode(reader.read_block(files, BLOCK))

            inputs.append(read)
        if shuffle:
            stage = feedq.shuffle_batch_join(
                inputs, BATCH, capacity=SHUFFLE_AFTER + 4 * BLOCK, min_after_dequeue=SHUFFLE_AFTER,
                seed=0, enqueue_many=True, dtypes=wl.dtypes, shapes=wl.shapes,
                allow_smaller_final_batch=True)
        else:
            stage = feedq.batch_join(inputs, BATCH, capacity=4 * BLOCK, enqueue_many=True, dtypes=wl.dtypes,
                                     shapes=wl.shapes, dynamic_pad=wl.dynamic_pad,
                                     allow_smaller_final_batch=True)
        for batch in stage:
            # One component comes bare (B2), several as a list.
            n += len(batch if isinstance(batch, np.ndarray) else batch[0])
    return n


SHUFFLE_AFTER = 10_000


def closed_queue(paths: list[Path]) -> FIFOQueue:
    q = FIFOQueue(capacity=-1, dtypes=["string"], shapes=[[]])
    q.enqueue_many([[str(p) for p in paths]])
    q.close()
    return q


def feedq_direct(wl: Workload) -> int:
    """One reader in this thread: read_block + decode, sliced into batches."""
    q = closed_queue(wl.paths)
    n = 0
    with wl.make_reader() as reader:
        while True:
            try:
                block = reader.read_block(q, 1 << 20)
            except OutOfRangeError:
                return n
            cols = wl.decode(block)
            for s in range(0, len(cols[0]), BATCH):
                n += len([c[s : s + BATCH] for c in cols][0])


# ----------------------------------------------------------------------------- TensorFlow
def tf_module() -> Any:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    try:
        import tensorflow as tf
    except ImportError:
        return None
    tf.get_logger().setLevel("ERROR")
    return tf


def tf_features(tf: Any, wl: Workload) -> dict[str, Any]:
    if wl.name == "varlen":
        return {"ids": tf.io.FixedLenSequenceFeature([], tf.int64, allow_missing=True),
                "label": tf.io.FixedLenFeature([], tf.int64)}
    return {"label": tf.io.FixedLenFeature([], tf.int64), "x": tf.io.FixedLenFeature([32], tf.float32)}


def tf_decode(tf: Any, wl: Workload, values: Any) -> list[Any]:
    if wl.name == "csv":
        return list(tf.io.decode_csv(values, CSV_DEFAULTS))
    if wl.name == "fixed":
        return [tf.reshape(tf.io.decode_raw(values, tf.float32), [-1, 33])]
    out = tf.io.parse_example(values, tf_features(tf, wl))
    return [out[k] for k in sorted(out)]


def tf1_queues(tf: Any, wl: Workload, readers: int = 2) -> int:
    """TF1's pipeline in a Graph + Session (queue runners, as TF 1.x ran it)."""
    v1 = tf.compat.v1
    g = tf.Graph()
    with g.as_default():
        fq = v1.train.string_input_producer([str(p) for p in wl.paths], num_epochs=1, shuffle=False)
        lists = []
        for _ in range(readers):
            if wl.name == "csv":
                r = v1.TextLineReader(skip_header_lines=1)
            elif wl.name == "fixed":
                r = v1.FixedLengthRecordReader(132)
            else:
                opts = v1.python_io.TFRecordOptions(v1.python_io.TFRecordCompressionType.GZIP) if wl.compression else None
                r = v1.TFRecordReader(options=opts)
            _, values = r.read_up_to(fq, TF1_BLOCK)
            lists.append(tf_decode(tf, wl, values))
        batch = v1.train.batch_join(lists, BATCH, capacity=4 * TF1_BLOCK, enqueue_many=True,
                                    dynamic_pad=wl.dynamic_pad, allow_smaller_final_batch=True)
        init = [v1.local_variables_initializer(), v1.global_variables_initializer()]
    n = 0
    with v1.Session(graph=g) as sess:
        sess.run(init)
        coord = v1.train.Coordinator()
        threads = v1.train.start_queue_runners(sess, coord)
        try:
            while True:
                out = sess.run(batch)  # one component comes bare, several as a list
                n += len(out if isinstance(out, np.ndarray) else out[0])
        except tf.errors.OutOfRangeError:
            pass
        finally:
            coord.request_stop()
            coord.join(threads)
    return n


def tf_data(tf: Any, wl: Workload) -> int:
    files = [str(p) for p in wl.paths]
    if wl.name == "csv":
        ds = tf.data.experimental.CsvDataset(files, CSV_DEFAULTS, header=True).batch(BATCH)
    else:
        if wl.name == "fixed":
            ds = tf.data.FixedLengthRecordDataset(files, 132)
        else:
            ds = tf.data.TFRecordDataset(files, compression_type=wl.compression or None)
        ds = ds.batch(BATCH).map(lambda v: tf_decode(tf, wl, v), num_parallel_calls=tf.data.AUTOTUNE)
    n = 0
    for b in ds.prefetch(4):
        n += int(b[0].shape[0])
    return n


# ----------------------------------------------------------------------------- references
def gunzip(wl: Workload) -> int:
    for p in wl.paths:
        d = zlib.decompressobj(31)
        with open(p, "rb") as f:
            while chunk := f.read(1 << 20):
                while chunk:
                    d.decompress(chunk, 1 << 22)
                    chunk = d.unconsumed_tail
    return 0


def arrow_csv(wl: Workload) -> int:
    import pyarrow.csv as pcsv

    return sum(pcsv.read_csv(p).num_rows for p in wl.paths)


def frombuffer(wl: Workload) -> int:
    return sum(np.frombuffer(p.read_bytes(), dtype="<f4").reshape(-1, 33).shape[0] for p in wl.paths)


_RAGGED: dict[str, tuple[np.ndarray, np.ndarray]] = {}


def numpy_pad(wl: Workload) -> int:
    """The padding alone, the rows in memory: every record's ``ids`` as one
    values array + row lengths (parsed once, in the untimed warm-up), then
    per batch of 256 a zeroed ``[256, longest]`` array filled by one
    vectorised NumPy scatter, and the labels sliced. What ``dynamic_pad``
    batches cost without reading or parsing."""
    if wl.name not in _RAGGED:
        values, lengths = [], []
        with TFRecordReader() as reader:
            q = closed_queue(wl.paths)
            while True:
                try:
                    block = reader.read_block(q, 1 << 16)
                except OutOfRangeError:
                    break
                ids = parse_example(block, {"ids": VarLenFeature(np.int64)})["ids"]
                values.append(np.asarray(ids.values))
                lengths.append(np.bincount(np.asarray(ids.indices)[:, 0], minlength=len(block)))
        _RAGGED[wl.name] = (np.concatenate(values), np.concatenate(lengths))
    values, lengths = _RAGGED[wl.name]
    starts = np.concatenate([[0], np.cumsum(lengths)])
    labels = np.zeros(len(lengths), np.int64)
    for s in range(0, len(lengths), BATCH):
        ln = lengths[s : s + BATCH]
        out = np.zeros((len(ln), int(ln.max(initial=0))), np.int64)
        rows = np.repeat(np.arange(len(ln)), ln)
        cols = np.arange(int(ln.sum())) - np.repeat(starts[s : s + len(ln)] - starts[s], ln)
        out[rows, cols] = values[starts[s] : starts[s + len(ln)]]
        _ = labels[s : s + BATCH]
    return 0


REFERENCE = {"gzip": ("plain gunzip (zlib, 1 thread)", gunzip),
             "varlen": ("NumPy pad ceiling (rows in memory)", numpy_pad),
             "csv": ("pyarrow.csv.read_csv", arrow_csv),
             "fixed": ("np.frombuffer of the bytes", frombuffer)}

# (workload, min M rec/s for the 2-reader pipeline, reference system, min ratio)
TARGETS = {
    "tfrecord": (3.0, "tf.data", 3.5),
    "gzip": (1.2, "reference", 0.75),
    "varlen": (2.0, "TF1 queues", 4.0),  # and >= 0.6x the NumPy pad ceiling (issue 22)
    "csv": (3.0, "reference", 0.65),
    "fixed": (25.0, "reference", 0.75),
}


# ----------------------------------------------------------------------------- main
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--repeats", type=int, default=3, help="rounds (each system once per round); median")
    ap.add_argument("--quick", action="store_true", help="200k records (development)")
    ap.add_argument("--no-tf", action="store_true", help="skip the TF1 and tf.data baselines")
    ap.add_argument("--only", default=",".join(WORKLOADS))
    ap.add_argument("--data", help="keep the generated files here and reuse them")
    args = ap.parse_args()
    n = 200_000 if args.quick else args.records
    only = set(args.only.split(","))
    tf = None if args.no_tf else tf_module()
    load0 = os.getloadavg()
    print(f"# python {' '.join(sys.argv)}  (records={n}, files={FILES}, rounds={args.repeats}, "
          f"batch={BATCH}, cpus={os.cpu_count()}, core={_native.CORE}, load avg {load0[0]:.2f} {load0[1]:.2f})",
          flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(args.data) if args.data else Path(tmp)
        t0 = time.perf_counter()
        files = make_data(root, n, only)
        print(f"# data ready in {time.perf_counter() - t0:.1f} s", flush=True)
        rows = []
        for wl in workloads(files):
            systems: list[tuple[str, Callable[[], int]]] = [
                ("feedq pipeline, 2 readers", functools.partial(feedq_pipeline, wl, 2)),
                ("feedq pipeline, 1 reader", functools.partial(feedq_pipeline, wl, 1)),
                ("feedq single-thread direct loop", functools.partial(feedq_direct, wl)),
            ]
            if wl.name == "tfrecord":
                systems.insert(1, ("feedq shuffle_batch_join, 2 readers",
                                   functools.partial(feedq_pipeline, wl, 2, shuffle=True)))
            if tf is not None:
                systems += [("TF1 queues (2 readers)", functools.partial(tf1_queues, tf, wl)),
                            ("tf.data", functools.partial(tf_data, tf, wl))]
            if wl.name in REFERENCE:
                label, fn = REFERENCE[wl.name]
                systems.append((f"reference: {label}", functools.partial(fn, wl)))
            for _, fn in systems:  # warm-up: page cache, imports, graph building
                fn()
            times: dict[str, list[float]] = {s: [] for s, _ in systems}
            for _ in range(args.repeats):
                for s, fn in systems:
                    t = time.perf_counter()
                    got = fn()
                    times[s].append(time.perf_counter() - t)
                    if got and got != n:
                        raise AssertionError(f"{wl.name} / {s}: {got} records, expected {n}")
            size = wl.file_bytes
            rates = {s: n / statistics.median(ts) for s, ts in times.items()}
            for s in times:
                spread = f"{min(n / t for t in times[s]) / 1e6:.2f}-{max(n / t for t in times[s]) / 1e6:.2f}"
                rows.append((wl.name, s, rates[s], size / statistics.median(times[s]) / 1e6, spread))
                print(f"{wl.name:<9} {s:<44} {rates[s] / 1e6:7.2f} M rec/s  ({spread})", flush=True)
            check(wl.name, rates)
    load1 = os.getloadavg()
    print(f"\n# load average at the end: {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f}")
    print("\n| workload | system | M records/s | MB/s (file bytes) | range over rounds |")
    print("| --- | --- | ---: | ---: | --- |")
    for w, s, r, m, spread in rows:
        print(f"| {w} | {s} | {r / 1e6:.2f} | {m:.0f} | {spread} |")
    print("\n" + "\n".join(CHECKS))


CHECKS: list[str] = []


def check(name: str, rates: dict[str, float]) -> None:
    if name not in TARGETS:
        return
    floor, ref, ratio = TARGETS[name]
    pipe = rates["feedq pipeline, 2 readers"]
    direct = rates["feedq single-thread direct loop"]
    ref_key = next((s for s in rates if s.startswith(ref)), None)
    parts = [f"{name}: pipeline {pipe / 1e6:.2f} M rec/s (target >= {floor}: {'ok' if pipe >= floor * 1e6 else 'MISSED'})"]
    if ref_key is not None:
        r = pipe / rates[ref_key]
        parts.append(f"{r:.2f}x {ref_key} (target >= {ratio}x: {'ok' if r >= ratio else 'MISSED'})")
    pad = next((s for s in rates if s.startswith("reference: NumPy pad")), None)
    if pad is not None:
        r = pipe / rates[pad]
        parts.append(f"{r:.2f}x the NumPy pad ceiling (issue 22: >= 0.6x: {'ok' if r >= 0.6 else 'MISSED'})")
    r = pipe / direct
    parts.append(f"{r:.2f}x the direct loop (target >= 1.3x: {'ok' if r >= 1.3 else 'MISSED'})")
    shuffled = rates.get("feedq shuffle_batch_join, 2 readers")
    if shuffled is not None:
        r = shuffled / pipe
        parts.append(f"shuffle_batch_join {r:.2f}x batch_join (issue 22: >= 0.67x: "
                     f"{'ok' if r >= 0.67 else 'MISSED'})")
    CHECKS.append("; ".join(parts))
    print("  " + CHECKS[-1], flush=True)


if __name__ == "__main__":
    main()
