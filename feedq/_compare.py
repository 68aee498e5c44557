"""``feedq bench --compare``: the same files, in the same run, through the
loaders a user would otherwise pick, each decoding what feedq decodes.

* ``tf.data``: ``TFRecordDataset`` / ``TextLineDataset`` (header lines
  skipped per file) / ``FixedLengthRecordDataset`` reading ``--readers``
  files in parallel, ``.batch(B)``, ``.map(parse, AUTOTUNE)`` with the
  inferred schema (``tf.io.parse_example`` + ``tf.sparse.to_dense`` for
  variable-length features, ``tf.io.decode_csv`` with the CSV column types,
  ``tf.io.decode_raw``), ``.prefetch(AUTOTUNE)``, batches taken as NumPy.
* ``DataLoader``: ``torch.utils.data.DataLoader(batch_size=B)`` over an
  ``IterableDataset`` that reads records in Python (TFRecord framing with
  CRCs not checked, text lines, fixed-size reads, pyarrow row batches; the
  files split over the workers) and decodes each one (protobuf ``Example`` parse with the
  inferred features, the CSV fields to the column types, ``np.frombuffer``),
  and a ``collate_fn`` that stacks the columns with the schema's dtypes
  (padding variable-length ones) into torch tensors; 0 and 2 workers.

With ``--shuffle`` each shuffles the file order and passes records through
a shuffle buffer (``--min-after-dequeue`` + batch size records).

Runs alternate (feedq, tf.data, DataLoader 0, DataLoader 2, then again) so
that machine noise hits all alike; each system first has one short warm-up
run (imports, graph tracing), not counted. CPU seconds are the process's
user + system time, with reaped children's (DataLoader workers) included.
"""

from __future__ import annotations

import csv
import dataclasses
import gzip
import io
import itertools
import os
import random
import statistics
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import IO, Any, cast

import numpy as np

from ._bench import cpu_seconds
from ._schema import Schema

__all__ = [
    "CompareRow", "Limits", "Measure", "System", "compare", "competitors", "cpu_seconds",
    "what_they_do",
]

#: Records of each system's warm-up run (imports, graph tracing), not counted.
WARMUP_BATCHES = 4


@dataclass(frozen=True)
class Limits:
    """When a run stops: the end of ``epochs``, ``duration`` s or ``max_records``
    (at the end of the batch that reaches it), as for feedq's own run."""

    batch_size: int
    epochs: int = 1
    duration: float | None = None
    max_records: int | None = None
    readers: int = 2
    #: Records a shuffle buffer holds (0: no shuffling; file order is
    #: shuffled too). feedq's shuffle_batch keeps ``--min-after-dequeue``.
    shuffle_buffer: int = 0
    seed: int = 0


@dataclass
class Measure:
    """One run: records delivered, their payload bytes, wall and CPU seconds."""

    records: int
    payload_bytes: int
    seconds: float
    cpu_s: float


@dataclass
class System:
    """A loader to compare: ``run(limits) -> Measure`` or why it cannot run."""

    name: str
    what: str
    run: Callable[[Limits], Measure] | None
    unavailable: str = ""
    measures: list[Measure] = field(default_factory=list)


@dataclass
class CompareRow:
    """A system's medians over the rounds. ``ratio``: feedq's records/s
    divided by this system's (how many times faster feedq was)."""

    system: str
    what: str
    status: str
    runs: int = 0
    records: int = 0
    payload_bytes: int = 0
    seconds: float = 0.0
    records_per_s: float = 0.0
    mb_per_s: float = 0.0
    cpu_s: float = 0.0
    ratio: float | None = None
    records_per_s_runs: list[float] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def compare(systems: list[System], limits: Limits, repeats: int,
            progress: Callable[[str], None] | None = None) -> tuple[list[CompareRow], bool]:
    """Warm each available system up, then run them in turn ``repeats``
    times; the rows (medians; the first system is the reference of the
    ratios), and whether Ctrl-C ended the rounds early (the rows then hold
    what was measured).

    A competitor that raises (a corrupt record that feedq skips with
    ``on_error="skip"``, say) becomes a row ``failed: <error>`` and runs no
    more; the first system's errors propagate.
    """
    first = systems[0] if systems else None

    def attempt(s: System, lim: Limits) -> Measure | None:
        assert s.run is not None
        try:
            return s.run(lim)
        except Exception as exc:
            if s is first:
                raise
            text = (str(exc).strip().splitlines() or [""])[0]
            text = text if len(text) <= 200 else text[:197] + "..."
            s.unavailable = f"failed: {type(exc).__name__}: {text}".rstrip(": ")
            s.run = None
            s.measures.clear()
            if progress is not None:
                progress(f"{s.name}: {s.unavailable}")
            return None

    warm = dataclasses.replace(limits, epochs=1,
                               max_records=WARMUP_BATCHES * limits.batch_size)
    interrupted = False
    try:
        for s in systems:
            if s.run is not None:
                if progress is not None:
                    progress(f"warm-up: {s.name}")
                attempt(s, warm)
        for r in range(repeats):
            for s in systems:
                if s.run is None:
                    continue
                m = attempt(s, limits)
                if m is None:
                    continue
                s.measures.append(m)
                if progress is not None:
                    progress(f"round {r + 1}/{repeats}: {s.name}: {m.records:,} records, "
                             f"{m.records / max(m.seconds, 1e-9):,.0f} rec/s")
    except KeyboardInterrupt:
        interrupted = True
    rows = [_row(s) for s in systems]
    ref = rows[0].records_per_s if rows and rows[0].runs else 0.0
    for row in rows:
        if row.runs and row.records_per_s > 0 and ref > 0:
            row.ratio = ref / row.records_per_s
    return rows, interrupted


def _row(s: System) -> CompareRow:
    if not s.measures:
        return CompareRow(s.name, s.what, s.unavailable or "not run")
    rates = [m.records / max(m.seconds, 1e-9) for m in s.measures]
    mbs = [m.payload_bytes / 1e6 / max(m.seconds, 1e-9) for m in s.measures]
    return CompareRow(s.name, s.what, "ok", runs=len(s.measures),
                      records=int(statistics.median(m.records for m in s.measures)),
                      payload_bytes=int(statistics.median(m.payload_bytes for m in s.measures)),
                      seconds=statistics.median(m.seconds for m in s.measures),
                      records_per_s=statistics.median(rates), mb_per_s=statistics.median(mbs),
                      cpu_s=statistics.median(m.cpu_s for m in s.measures),
                      records_per_s_runs=rates)


def timed(batches: Callable[[], Iterator[tuple[int, int]]], limits: Limits) -> Measure:
    """Drain ``batches()`` (``(records, payload bytes)`` per batch) once per
    epoch under ``limits``, timing wall and CPU seconds. The generator is
    closed before the clock stops, so DataLoader workers are reaped (and
    their CPU time counted)."""
    c0, t0 = cpu_seconds(), time.perf_counter()
    deadline = None if limits.duration is None else t0 + limits.duration
    records = payload = 0
    done = False
    for _ in range(limits.epochs):
        it = batches()
        try:
            for n, nbytes in it:
                records += n
                payload += nbytes
                if limits.max_records is not None and records >= limits.max_records:
                    done = True
                elif deadline is not None and time.perf_counter() >= deadline:
                    done = True
                if done:
                    break
        finally:
            close = getattr(it, "close", None)
            if close is not None:
                close()
        if done:
            break
    t1 = time.perf_counter()
    return Measure(records, payload, t1 - t0, cpu_seconds() - c0)


# -- what each competitor does ----------------------------------------------------------------


def what_they_do(schema: Schema, batch_size: int, readers: int,
                 shuffle_buffer: int = 0) -> dict[str, str]:
    """One line per competitor, for the output."""
    fmt = schema.fmt
    tf_src = {"tfrecord": "TFRecordDataset", "csv": "TextLineDataset", "lines": "TextLineDataset",
              "fixed": "FixedLengthRecordDataset"}.get(fmt, "none")
    files = "shuffled file names -> " if shuffle_buffer else ""
    tf_shuffle = f".shuffle({shuffle_buffer})" if shuffle_buffer else ""
    py_shuffle = (f", shuffled file order and a shuffle buffer of {shuffle_buffer:,} records"
                  if shuffle_buffer else "")
    return {
        "tf.data": f"{files}{tf_src}(num_parallel_reads={readers}){tf_shuffle}.batch({batch_size})"
                   f".map({_tf_parse_name(schema)}, AUTOTUNE).prefetch(AUTOTUNE), as NumPy",
        "DataLoader": f"IterableDataset reading records in Python, each {_py_parse_name(schema)}"
                      f"{py_shuffle}; DataLoader(batch_size={batch_size}, "
                      "collate_fn: stack with the schema's dtypes)",
    }


def _tf_parse_name(schema: Schema) -> str:
    if schema.fmt == "csv":
        return "decode_csv"
    if schema.fmt == "tfrecord" and schema.features:
        return "parse_example"
    if schema.fmt == "fixed":
        return "decode_raw"
    return "strings.length"


def _py_parse_name(schema: Schema) -> str:
    if schema.fmt == "csv":
        return "split into typed fields"
    if schema.fmt == "tfrecord" and schema.features:
        return "parsed as a protobuf Example (CRCs not checked)"
    if schema.fmt == "fixed":
        return "np.frombuffer"
    if schema.fmt == "parquet":
        return "a row of pyarrow batches"
    return "measured (its length)"


def competitors(files: list[str], schema: Schema, *, batch_size: int, readers: int,
                workers: tuple[int, ...] = (0, 2), shuffle_buffer: int = 0) -> list[System]:
    """tf.data and one DataLoader per worker count, or rows saying why not."""
    what = what_they_do(schema, batch_size, readers, shuffle_buffer)
    out = [_tf_system(files, schema, what["tf.data"])]
    for w in workers:
        out.append(_torch_system(files, schema, w, what["DataLoader"]))
    return out


# -- tf.data -------------------------------------------------------------------------------------


def import_tensorflow() -> Any:
    """TensorFlow, quiet, or None when it is not installed."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    try:
        import tensorflow as tf
    except ImportError:
        return None
    tf.get_logger().setLevel("ERROR")
    return tf


def _tf_system(files: list[str], schema: Schema, what: str) -> System:
    name = "tf.data"
    if schema.fmt == "parquet":
        return System(name, what, None, "not supported: TensorFlow has no Parquet dataset")
    if schema.compression == "ZSTD":
        return System(name, what, None, "not supported: tf.data reads no zstd")
    tf = import_tensorflow()
    if tf is None:
        return System(name, what, None, "not installed (pip install tensorflow)")
    cache: dict[Any, Any] = {}
    return System(name, what,
                  lambda lim: timed(lambda: _tf_batches(tf, files, schema, lim, cache), lim))


def _tf_dtype(tf: Any, dtype: Any) -> Any:
    if dtype is str:
        return tf.string
    return tf.as_dtype(np.dtype(dtype))


def _tf_batches(tf: Any, files: list[str], schema: Schema, limits: Limits,
                cache: dict[Any, Any]) -> Iterator[tuple[int, int]]:
    """One pass over the dataset; the dataset is built (and its map traced)
    once per ``limits``, as a user iterates one dataset epoch after epoch."""
    key = (limits.batch_size, limits.readers, limits.shuffle_buffer, limits.seed)
    if key not in cache:
        cache.clear()
        cache[key] = _tf_dataset(tf, files, schema, limits)
    for cols, nbytes in cache[key].as_numpy_iterator():
        yield len(cols[0]), int(nbytes)


def _tf_dataset(tf: Any, files: list[str], schema: Schema, limits: Limits) -> Any:
    comp = schema.compression or ""
    fmt = schema.fmt
    readers, buffer = limits.readers, limits.shuffle_buffer
    names = tf.data.Dataset.from_tensor_slices(files)
    if buffer:  # a new file order each epoch, as string_input_producer(shuffle=True)
        names = names.shuffle(len(files), seed=limits.seed)
    if fmt == "tfrecord":
        ds = tf.data.TFRecordDataset(names, compression_type=comp, num_parallel_reads=readers)
    elif fmt == "fixed":
        ds = tf.data.FixedLengthRecordDataset(names, schema.record_bytes or 132,
                                              compression_type=comp,
                                              num_parallel_reads=readers)
    else:  # csv, lines
        skip = schema.skip_header_lines
        ds = names.interleave(
            lambda f: tf.data.TextLineDataset(f, compression_type=comp).skip(skip),
            cycle_length=readers, num_parallel_calls=readers)
    if buffer:
        ds = ds.shuffle(buffer, seed=limits.seed)
    batch_size = limits.batch_size
    parse = _tf_parse(tf, schema)

    def both(values: Any) -> Any:
        return tuple(parse(values)), tf.reduce_sum(tf.strings.length(values, unit="BYTE"))

    auto = tf.data.AUTOTUNE
    return ds.batch(batch_size).map(both, num_parallel_calls=auto).prefetch(auto)


def _tf_parse(tf: Any, schema: Schema) -> Callable[[Any], list[Any]]:
    if schema.fmt == "csv":
        defaults = [tf.constant([""] if d is str else [0], dtype=_tf_dtype(tf, d))
                    for d in schema.dtypes]
        return lambda v: list(tf.io.decode_csv(v, defaults))
    if schema.fmt == "fixed":
        return lambda v: [tf.io.decode_raw(v, tf.uint8)]
    if schema.fmt == "tfrecord" and schema.features:
        from .readers import VarLenFeature

        feats: dict[str, Any] = {}
        for n, f in schema.features.items():
            dt = _tf_dtype(tf, f.dtype)
            feats[n] = tf.io.VarLenFeature(dt) if isinstance(f, VarLenFeature) else \
                tf.io.FixedLenFeature(list(f.shape), dt)

        def example(v: Any) -> list[Any]:
            out = tf.io.parse_example(v, feats)
            cols = []
            for n in schema.names:
                t = out[n]
                cols.append(tf.sparse.to_dense(t) if isinstance(t, tf.sparse.SparseTensor) else t)
            return cols

        return example
    return lambda v: [tf.strings.length(v, unit="BYTE")]


# -- torch DataLoader ----------------------------------------------------------------------------


def _torch_system(files: list[str], schema: Schema, workers: int, what: str) -> System:
    name = f"DataLoader, {workers} worker{'s' if workers != 1 else ''}"
    try:
        import torch.utils.data  # noqa: F401
    except ImportError:
        return System(name, what, None, "not installed (pip install torch)")
    if schema.compression == "ZSTD":
        try:
            import zstandard  # noqa: F401
        except ImportError:
            return System(name, what, None,
                          'not installed: zstandard (pip install "feedq[zstd]")')
    return System(name, what,
                  lambda lim: timed(lambda: _torch_batches(files, schema, workers, lim), lim))


def _torch_batches(files: list[str], schema: Schema, workers: int,
                   limits: Limits) -> Iterator[tuple[int, int]]:
    import torch.utils.data

    # A new seed each epoch (each call), the same one in every worker.
    seed = random.Random(f"{limits.seed}/{next(_EPOCHS)}").randrange(2**32)
    dataset = _torch_dataset_class()(files, schema, limits.shuffle_buffer, seed)
    loader = torch.utils.data.DataLoader(dataset, batch_size=limits.batch_size,
                                         num_workers=workers, collate_fn=Collate(schema))
    it = iter(loader)
    try:
        for cols, nbytes in it:
            yield len(cols[0]), nbytes
    finally:
        shutdown = getattr(it, "_shutdown_workers", None)
        if shutdown is not None:  # reap the workers now, so their CPU time is counted
            shutdown()


class Records:
    """Per-record reading and decoding in Python, as a DataLoader user writes
    it: ``iter(Records(files, schema))`` yields ``(*columns, payload bytes)``;
    in a DataLoader worker, only that worker's share of the files. With
    ``shuffle_buffer``, the file order is shuffled (by ``seed``, the same in
    every worker) and records pass through a shuffle buffer of that size."""

    def __init__(self, files: list[str], schema: Schema, shuffle_buffer: int = 0,
                 seed: int = 0) -> None:
        self.files = files
        self.schema = schema
        self.shuffle_buffer = shuffle_buffer
        self.seed = seed

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        import torch.utils.data

        info = torch.utils.data.get_worker_info()
        files = list(self.files)
        rng = random.Random(f"{self.seed}/{0 if info is None else info.id}")
        if self.shuffle_buffer:
            random.Random(self.seed).shuffle(files)  # the same order in every worker
        mine = files if info is None else files[info.id :: info.num_workers]
        records = self._records(mine)
        if not self.shuffle_buffer:
            yield from records
            return
        buffer: list[tuple[Any, ...]] = []
        for rec in records:
            if len(buffer) < self.shuffle_buffer:
                buffer.append(rec)
                continue
            i = rng.randrange(len(buffer))
            yield buffer[i]
            buffer[i] = rec
        rng.shuffle(buffer)
        yield from buffer

    def _records(self, files: list[str]) -> Iterator[tuple[Any, ...]]:
        decode = _py_decoder(self.schema)
        for path in files:
            if self.schema.fmt == "parquet":
                yield from _parquet_rows(path, self.schema)
                continue
            for rec in _py_records(path, self.schema):
                yield (*decode(rec), len(rec))


_DATASET_CLASS: list[type] = []
_EPOCHS = itertools.count()


def _torch_dataset_class() -> type:
    """``Records`` as a ``torch.utils.data.IterableDataset`` (made on first
    use: torch is an optional extra); also reachable as this module's
    ``TorchRecords`` attribute, so that spawned workers can unpickle it."""
    if not _DATASET_CLASS:
        import torch.utils.data

        bases = (Records, torch.utils.data.IterableDataset)
        cls = type("TorchRecords", bases, {"__module__": __name__})
        _DATASET_CLASS.append(cls)
    return _DATASET_CLASS[0]


def __getattr__(name: str) -> Any:
    if name == "TorchRecords":
        return _torch_dataset_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class Collate:
    """``collate_fn``: a list of records -> (columns as torch tensors, or NumPy
    for strings; payload bytes), variable-length columns padded to the
    longest in the batch."""

    def __init__(self, schema: Schema) -> None:
        self.dtypes = [np.dtype(object) if d is str else np.dtype(d) for d in schema.dtypes]
        self.ragged = [None in s for s in schema.shapes]

    def __call__(self, samples: list[tuple[Any, ...]]) -> tuple[list[Any], int]:
        import torch

        cols: list[Any] = []
        for i, (dt, ragged) in enumerate(zip(self.dtypes, self.ragged)):
            vals = [s[i] for s in samples]
            if ragged:
                width = max((len(v) for v in vals), default=0)
                arr = np.zeros((len(vals), width), dtype=dt) if dt.kind != "O" else np.full(
                    (len(vals), width), b"", dtype=object)
                for j, v in enumerate(vals):
                    arr[j, : len(v)] = v
            else:
                arr = np.array(vals, dtype=dt)
            cols.append(arr if dt.kind == "O" else torch.from_numpy(arr))
        return cols, sum(s[-1] for s in samples)


def _open(path: str, compression: str | None) -> IO[bytes]:
    if compression == "GZIP":
        return cast(IO[bytes], gzip.open(path, "rb"))
    if compression == "ZLIB":
        with open(path, "rb") as f:
            return io.BytesIO(zlib.decompress(f.read()))
    if compression == "ZSTD":
        import zstandard

        return io.BufferedReader(zstandard.ZstdDecompressor().stream_reader(open(path, "rb"),  # noqa: SIM115
                                                                             closefd=True))
    return open(path, "rb")  # noqa: SIM115


def _py_records(path: str, schema: Schema) -> Iterator[bytes]:
    with _open(path, schema.compression) as f:
        if schema.fmt == "tfrecord":  # length, its CRC, data, its CRC (CRCs not checked)
            while True:
                head = f.read(12)
                if len(head) < 12:
                    return
                n = int.from_bytes(head[:8], "little")
                rec = f.read(n)
                f.read(4)
                yield rec
        elif schema.fmt == "fixed":
            size = schema.record_bytes or 132
            while len(rec := f.read(size)) == size:
                yield rec
        else:
            for i, line in enumerate(f):
                if i >= schema.skip_header_lines:
                    yield line.rstrip(b"\r\n")


def _parquet_rows(path: str, schema: Schema) -> Iterator[tuple[Any, ...]]:
    import pyarrow.parquet as pq

    row = sum(np.dtype(d).itemsize for d in schema.dtypes if d is not str)
    for batch in pq.ParquetFile(path).iter_batches(columns=schema.names):
        cols = [batch.column(n).to_numpy(zero_copy_only=False) for n in schema.names]
        for i in range(batch.num_rows):
            yield (*(c[i] for c in cols), row)


def _to_bytes(v: str) -> bytes:
    return v.encode()


def _to_float(v: str) -> float:
    return float(v) if v.strip() else 0.0  # an empty field takes the default


def _to_int(v: str) -> int:
    return int(v) if v.strip() else 0


def _py_decoder(schema: Schema) -> Callable[[bytes], tuple[Any, ...]]:
    fmt = schema.fmt
    if fmt == "csv":
        convert: list[Callable[[str], Any]] = [
            _to_bytes if d is str else _to_float if np.dtype(d).kind == "f" else _to_int
            for d in schema.dtypes]

        def row(rec: bytes) -> tuple[Any, ...]:
            text = rec.decode()
            fields = next(csv.reader([text])) if '"' in text else text.split(",")
            if len(fields) != len(convert):
                raise ValueError(f"{len(fields)} fields, expected {len(convert)}: {text[:80]!r}")
            return tuple(c(v) for c, v in zip(convert, fields))

        return row
    if fmt == "fixed":
        return lambda rec: (np.frombuffer(rec, np.uint8),)
    if fmt == "tfrecord" and schema.features:
        from .readers import VarLenFeature, example_class

        cls = example_class()
        specs = [(n, schema.features[n], isinstance(schema.features[n], VarLenFeature))
                 for n in schema.names]

        def example(rec: bytes) -> tuple[Any, ...]:
            msg = cls()
            msg.ParseFromString(rec)
            feats = msg.features.feature
            out: list[Any] = []
            for n, f, var in specs:
                if n in feats:
                    kind = feats[n].WhichOneof("kind")
                    values = list(getattr(feats[n], kind).value) if kind else []
                elif var:
                    values = []
                else:
                    raise ValueError(f"feature {n} missing from a record")
                if var or f.shape:
                    out.append(np.asarray(values, dtype=object if f.dtype is str else f.dtype))
                else:
                    out.append(values[0])
            return tuple(out)

        return example
    return lambda rec: (len(rec),)


# -- output -------------------------------------------------------------------------------------


def render(rows: list[CompareRow], repeats: int, notes: dict[str, str]) -> list[str]:
    """The comparison as text lines: one row per loader, then what each does."""
    rounds = f"{repeats} round{'s' if repeats != 1 else ''}"
    out = [f"compared on the same files in this run ({rounds}, loaders alternating, medians; wall "
           "time includes start-up and shut-down; CPU s: process + workers):"]
    width = max(len(r.system) for r in rows)
    out.append(f"  {'loader'.ljust(width)}  {'records/s':>12}  {'MB/s':>8}  {'CPU s':>7}  "
               f"{'feedq x':>8}  records/s range")
    for r in rows:
        if not r.runs:
            out.append(f"  {r.system.ljust(width)}  {r.status}")
            continue
        ratio = f"{r.ratio:.2f}x" if r.ratio is not None else "-"
        spread = f"{min(r.records_per_s_runs):,.0f} - {max(r.records_per_s_runs):,.0f}"
        out.append(f"  {r.system.ljust(width)}  {r.records_per_s:>12,.0f}  {r.mb_per_s:>8,.1f}  "
                   f"{r.cpu_s:>7.2f}  {ratio:>8}  {spread}")
    out.append("  feedq x: feedq's records/s divided by the loader's (2.00x: feedq twice as fast)")
    for name, text in notes.items():
        out.append(f"  {name}: {text}")
    return out
