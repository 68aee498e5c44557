"""``feedq bench --compare``: the same files, in the same run, through the
loaders a user would otherwise pick, each decoding what feedq decodes.

* ``tf.data``: ``TFRecordDataset`` / ``TextLineDataset`` (header lines
  skipped per file) / ``FixedLengthRecordDataset`` reading ``--readers``
  files in parallel, ``.batch(B)``, ``.map(parse, AUTOTUNE)`` with the
  inferred schema (``tf.io.parse_example`` + ``tf.sparse.to_dense`` for
  variable-length features, ``tf.io.decode_csv`` with the CSV column types,
  ``tf.io.decode_raw``), ``.prefetch(AUTOTUNE)``, batches taken as NumPy.
* ``DataLoader`` (``feedq.cli._compare_torch``): ``DataLoader(batch_size=B)`` over an
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

import dataclasses
import os
import statistics
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from feedq.cli._measure import Limits, Measure, System, timed
from feedq.cli._schema import Schema

__all__ = ["CompareRow", "compare", "competitors", "render", "what_they_do"]

#: Records of each system's warm-up run (imports, graph tracing), not counted.
WARMUP_BATCHES = 4


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


# -- what each competitor does ----------------------------------------------------------------


def what_they_do(schema: Schema, batch_size: int, readers: int,
                 shuffle_buffer: int = 0) -> dict[str, str]:
    """One line per competitor, for the output."""
    fmt = schema.fmt
    tf_src = {"tfrecord": "TFRecordDataset", "csv": "TextLineDataset", "lines": "TextLineDataset",
              "fixed": "FixedLengthRecordDataset"}.get(fmt, "none")  # none: parquet
    files = "shuffled file names -> " if shuffle_buffer else ""
    tf_shuffle = f".shuffle({shuffle_buffer})" if shuffle_buffer else ""
    py_shuffle = (f", shuffled file order and a shuffle buffer of {shuffle_buffer:,} records"
                  if shuffle_buffer else "")
    notes = {
        "tf.data": f"{files}{tf_src}(num_parallel_reads={readers}){tf_shuffle}.batch({batch_size})"
                   f".map({_tf_parse_name(schema)}, AUTOTUNE).prefetch(AUTOTUNE), as NumPy",
        "DataLoader": f"IterableDataset reading records in Python, each {_py_parse_name(schema)}"
                      f"{py_shuffle}; DataLoader(batch_size={batch_size}, "
                      "collate_fn: stack with the schema's dtypes)",
    }
    if tf_src == "none":  # no tf.data pipeline ran (its row says why)
        del notes["tf.data"]
    return notes


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
    from feedq.cli._compare_torch import torch_system

    out = [_tf_system(files, schema, what.get("tf.data", ""))]
    for w in workers:
        out.append(torch_system(files, schema, w, what["DataLoader"]))
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
        from feedq.readers import VarLenFeature

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


# -- output -------------------------------------------------------------------------------------


def render(rows: list[CompareRow], repeats: int, notes: dict[str, str],
           unit: str = "records") -> list[str]:
    """The comparison as text lines: one row per loader, then what each does.
    ``unit="images"``: images/s, and CPU milliseconds per image instead of CPU
    seconds."""
    rounds = f"{repeats} round{'s' if repeats != 1 else ''}"
    images = unit == "images"
    cpu = "CPU ms/image" if images else "CPU s"
    out = [f"compared on the same files in this run ({rounds}, loaders alternating, medians; wall "
           f"time includes start-up and shut-down; {cpu}: process + workers):"]
    width = max(len(r.system) for r in rows)
    out.append(f"  {'loader'.ljust(width)}  {unit + '/s':>12}  {'MB/s':>8}  {cpu:>{12 if images else 7}}  "
               f"{'feedq x':>8}  {unit}/s range")
    for r in rows:
        if not r.runs:
            out.append(f"  {r.system.ljust(width)}  {r.status}")
            continue
        ratio = f"{r.ratio:.2f}x" if r.ratio is not None else "-"
        spread = f"{min(r.records_per_s_runs):,.0f} - {max(r.records_per_s_runs):,.0f}"
        cost = (f"{1000 * r.cpu_s / r.records if r.records else 0.0:>12.2f}" if images
                else f"{r.cpu_s:>7.2f}")
        out.append(f"  {r.system.ljust(width)}  {r.records_per_s:>12,.0f}  {r.mb_per_s:>8,.1f}  "
                   f"{cost}  {ratio:>8}  {spread}")
    out.append(f"  feedq x: feedq's {unit}/s divided by the loader's (2.00x: feedq twice as fast)")
    for name, text in notes.items():
        out.append(f"  {name}: {text}")
    return out
