"""The measuring pipeline behind ``feedq bench`` and ``feedq demo``:
files -> string_input_producer -> reader threads (read_block + decode) ->
batch_join / shuffle_batch_join -> a consumer loop that times itself.

Schemas are inferred from the first file, in the calling thread, before the
pipeline starts: CSV header and column types, TFRecord Example feature names,
kinds and value counts, Parquet columns.
"""

from __future__ import annotations

import gzip
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from . import input as finput
from .errors import FeedqError, OutOfRangeError
from .pipeline import Pipeline
from .readers import (
    FixedLenFeature,
    FixedLengthRecordReader,
    ParquetReader,
    TextLineReader,
    TFRecordReader,
    VarLenFeature,
    decode_csv,
    decode_raw,
    example_class,
    parse_example,
)

__all__ = ["BenchResult", "Schema", "infer_schema", "run_bench"]


@dataclass
class Schema:
    """What a reader thread produces for one format."""

    fmt: str
    compression: str | None
    names: list[str]
    dtypes: list[Any]
    shapes: list[list[int | None]]
    skip_header_lines: int = 0
    record_defaults: list[Any] = field(default_factory=list)
    features: dict[str, Any] = field(default_factory=dict)
    record_bytes: int | None = None
    info: dict[str, Any] = field(default_factory=dict)


def _open_text(path: str, compression: str | None) -> Any:
    if compression == "GZIP":
        return gzip.open(path, "rb")
    if compression == "ZLIB":
        return _ZlibLines(path)
    return open(path, "rb")  # noqa: SIM115 - closed by the caller


class _ZlibLines:
    def __init__(self, path: str) -> None:
        self._data = zlib.decompress(Path(path).read_bytes())

    def __enter__(self) -> Any:
        import io

        return io.BytesIO(self._data)

    def __exit__(self, *exc: Any) -> None:
        return None


def _field_kind(text: str) -> str:
    t = text.strip()
    try:
        int(t)
        return "int"
    except ValueError:
        pass
    try:
        float(t)
        return "float"
    except ValueError:
        return "string"


def _csv_schema(path: str, compression: str | None) -> Schema:
    with _open_text(path, compression) as f:
        lines = [f.readline().decode("utf-8", "replace").rstrip("\r\n") for _ in range(2)]
    first, second = lines
    if not first:
        raise FeedqError(f"{path}: empty CSV file, nothing to infer a schema from")
    head = first.split(",")
    data = second.split(",") if second else head
    header = bool(second) and all(_field_kind(h) == "string" for h in head) and any(
        _field_kind(d) != "string" for d in data
    )
    row = data if header else head
    names = head if header else [f"c{i}" for i in range(len(row))]
    kinds = [_field_kind(v) for v in row]
    defaults: list[Any] = [[0] if k == "int" else [0.0] if k == "float" else [""] for k in kinds]
    dtypes: list[Any] = [np.int32 if k == "int" else np.float32 if k == "float" else str for k in kinds]
    return Schema("csv", compression, names, dtypes, [[] for _ in names], skip_header_lines=int(header),
                  record_defaults=defaults, info={"header": header, "columns": dict(zip(names, kinds))})


def _example_features(record: bytes) -> tuple[dict[str, Any], dict[str, Any]]:
    msg = example_class()()
    msg.ParseFromString(record)
    features: dict[str, Any] = {}
    info: dict[str, Any] = {}
    for name in sorted(msg.features.feature):
        feat = msg.features.feature[name]
        kind = feat.WhichOneof("kind")
        dtype: Any
        if kind == "float_list":
            dtype, count = np.float32, len(feat.float_list.value)
        elif kind == "int64_list":
            dtype, count = np.int64, len(feat.int64_list.value)
        else:
            dtype, count = str, len(feat.bytes_list.value)
        features[name] = (dtype, count)
        info[name] = {"kind": kind or "empty", "values": count}
    return features, info


def _tfrecord_schema(path: str, compression: str | None) -> Schema:
    from .readers import tf_record_iterator

    sample: list[bytes] = []
    for rec in tf_record_iterator(path, options=compression or ""):
        sample.append(rec)
        if len(sample) >= 16:
            break
    if not sample:
        raise FeedqError(f"{path}: no records to infer a schema from")
    try:
        per = [_example_features(r) for r in sample]
    except Exception:  # noqa: BLE001 - not tf.train.Example: measure raw records
        return Schema("tfrecord", compression, ["bytes"], [np.int64], [[]], info={"examples": False})
    names = sorted(per[0][0])
    features: dict[str, Any] = {}
    dtypes: list[Any] = []
    shapes: list[list[int | None]] = []
    for n in names:
        dtype, count = per[0][0][n]
        fixed = all(p[0].get(n) == (dtype, count) for p in per)
        if fixed:
            shape: list[int | None] = [] if count == 1 else [count]
            features[n] = FixedLenFeature([int(d) for d in shape if d is not None], dtype)
            dtypes.append(dtype)
            shapes.append(shape)
        else:
            features[n] = VarLenFeature(dtype)
            dtypes.append(dtype)
            shapes.append([None])
    return Schema("tfrecord", compression, names, dtypes, shapes, features=features,
                  info={"examples": True, "features": per[0][1]})


def _parquet_schema(path: str) -> Schema:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from .errors import DataLossError, NotFoundError

    try:
        pf = pq.ParquetFile(path)
    except FileNotFoundError:
        raise NotFoundError(f"{path}; No such file or directory") from None
    except (pa.ArrowInvalid, OSError) as exc:
        raise DataLossError(f"{path}: not a readable Parquet file: {exc}") from None
    names, dtypes = [], []
    for f in pf.schema_arrow:
        names.append(f.name)
        try:
            dtypes.append(np.dtype(f.type.to_pandas_dtype()))
        except (NotImplementedError, TypeError):
            dtypes.append(str)
    return Schema("parquet", None, names, dtypes, [[] for _ in names],
                  info={"rows": pf.metadata.num_rows, "row_groups": pf.metadata.num_row_groups,
                        "columns": {n: str(f.type) for n, f in zip(names, pf.schema_arrow)}})


def infer_schema(path: str, fmt: str, compression: str | None, record_bytes: int | None = None) -> Schema:
    """The schema of ``path`` for format ``fmt``."""
    if fmt == "csv":
        return _csv_schema(path, compression)
    if fmt == "tfrecord":
        return _tfrecord_schema(path, compression)
    if fmt == "parquet":
        return _parquet_schema(path)
    if fmt == "fixed":
        rb = record_bytes or 132
        return Schema("fixed", compression, ["record"], [np.uint8], [[rb]], record_bytes=rb)
    if fmt == "lines":
        return Schema("lines", compression, ["length"], [np.int64], [[]])
    raise ValueError(f"unknown format {fmt!r}")


def make_reader(schema: Schema, on_error: str) -> Any:
    """A reader for ``schema``'s format."""
    if schema.fmt in ("csv", "lines"):
        return TextLineReader(skip_header_lines=schema.skip_header_lines, compression=schema.compression,
                              on_error=on_error)  # type: ignore[arg-type]
    if schema.fmt == "tfrecord":
        return TFRecordReader(options=schema.compression or "", on_error=on_error)  # type: ignore[arg-type]
    if schema.fmt == "fixed":
        return FixedLengthRecordReader(schema.record_bytes or 132, encoding=schema.compression,
                                       on_error=on_error)  # type: ignore[arg-type]
    return ParquetReader(columns=schema.names, on_error=on_error)  # type: ignore[arg-type]


def make_decoder(schema: Schema) -> Callable[[Any], tuple[list[np.ndarray], int]]:
    """``block -> (components, payload bytes)`` for ``schema``."""
    fmt = schema.fmt
    if fmt == "csv":
        defaults = schema.record_defaults

        def csv(block: Any) -> tuple[list[np.ndarray], int]:
            return decode_csv(block, record_defaults=defaults), int(block.lengths.sum())

        return csv
    if fmt == "tfrecord":
        if not schema.features:
            return lambda block: ([block.lengths.astype(np.int64)], int(block.lengths.sum()))
        features, names = schema.features, schema.names

        def example(block: Any) -> tuple[list[np.ndarray], int]:
            parsed = parse_example(block, features)
            cols = []
            for n in names:
                v = parsed[n]
                if isinstance(features[n], VarLenFeature):
                    # Ragged values: pad to the block's longest (dynamic_pad does the rest).
                    dense = np.zeros(tuple(v.dense_shape), dtype=v.values.dtype)
                    dense[v.indices[:, 0], v.indices[:, 1]] = v.values
                    v = dense
                cols.append(v)
            return cols, int(block.lengths.sum())

        return example
    if fmt == "fixed":
        return lambda block: ([decode_raw(block, np.uint8)], int(block.lengths.sum()))
    if fmt == "lines":
        return lambda block: ([block.lengths.astype(np.int64)], int(block.lengths.sum()))
    names = schema.names

    def parquet(block: Any) -> tuple[list[np.ndarray], int]:
        vals = block.values()
        cols = [vals[n] for n in names]
        return cols, int(sum(c.nbytes for c in cols if c.dtype != object))

    return parquet


@dataclass
class BenchResult:
    """What ``feedq bench`` / ``feedq demo`` report."""

    format: str
    files: int
    records: int = 0
    batches: int = 0
    seconds: float = 0.0
    payload_bytes: int = 0
    records_per_s: float = 0.0
    mb_per_s: float = 0.0
    consumer_wait_fraction: float = 0.0
    batch_queue_fill_mean: float = 0.0
    batch_queue_fill_max: float = 0.0
    filename_queue_fill_mean: float = 0.0
    skipped_errors: int = 0
    stopped_by: str = "end of data"
    extra: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def run_bench(
    paths: list[str],
    schema: Schema,
    *,
    batch_size: int = 256,
    readers: int = 2,
    threads: int = 1,
    shuffle: bool = False,
    min_after_dequeue: int = 1000,
    epochs: int | None = 1,
    duration: float | None = None,
    max_records: int | None = None,
    on_error: str = "raise",
    consume: Callable[[Any], None] | None = None,
    progress: Callable[[BenchResult], None] | None = None,
    progress_every: float = 0.25,
    seed: int = 0,
    device: str | None = None,
    block_records: int | None = None,
    direct: bool = False,
) -> BenchResult:
    """Run the pipeline until the data, ``duration`` or ``max_records`` ends.

    ``consume(batch)`` is called on every batch (the demo trains there).
    Readers take ``block_records`` records per ``read_block`` (default
    ``max(batch_size, 4096)``): decoding a block is one call, and the batch
    queue re-slices blocks into batches (``enqueue_many``), so the per-record
    Python work is nil. With ``device``, batches go through a :class:`feedq.devices.DeviceFeeder`
    to that device first (NumPy on the host, torch tensors elsewhere).
    KeyboardInterrupt stops the pipeline cleanly and returns what was
    measured, with ``stopped_by == "interrupted"``.

    Raises:
        FeedqError: a read or decode error (with ``on_error="raise"``).
    """
    if direct:
        return _run_direct(paths, schema, batch_size=batch_size, epochs=epochs, shuffle=shuffle, seed=seed,
                           duration=duration, max_records=max_records, on_error=on_error, consume=consume,
                           block_records=block_records or (1 << 20))
    result = BenchResult(format=schema.fmt, files=len(paths))
    block = block_records or max(batch_size, 4096)
    payload = [0]
    reader_objs: list[Any] = []
    decode = make_decoder(schema)
    dynamic = any(None in s for s in schema.shapes)
    t0 = time.perf_counter()
    waited = 0.0
    fill_sum = fill_max = fname_sum = 0.0
    samples = 0
    last_progress = t0
    stopped_at: list[float | None] = [None]
    payload_lock = threading.Lock()
    try:
        with Pipeline() as pipe:
            files = finput.string_input_producer(paths, num_epochs=epochs, shuffle=shuffle, seed=seed,
                                                 capacity=max(32, 2 * len(paths)))
            inputs = []
            for _ in range(readers):
                reader = make_reader(schema, on_error)
                reader_objs.append(reader)

                def read(reader: Any = reader) -> list[np.ndarray]:
                    blk = reader.read_block(files, block)
                    cols, nbytes = decode(blk)
                    with payload_lock:  # several reader threads add to it
                        payload[0] += nbytes
                    return cols

                inputs.extend([read] * threads)
            common: dict[str, Any] = dict(enqueue_many=True, dtypes=schema.dtypes, shapes=schema.shapes,
                                          allow_smaller_final_batch=True)
            capacity = max(4 * batch_size, 2 * readers * threads * block)
            if shuffle:
                stage = finput.shuffle_batch_join(inputs, batch_size, capacity=min_after_dequeue + capacity,
                                                  min_after_dequeue=min_after_dequeue, seed=seed, **common)
            else:
                stage = finput.batch_join(inputs, batch_size, capacity=capacity, dynamic_pad=dynamic, **common)
            deadline = None if duration is None else t0 + duration

            def take(t: float | None) -> Any:
                return stage.dequeue(timeout=t)

            feeder = None
            if device is not None:
                from .devices import DeviceFeeder

                on_host = device in ("cpu", "/cpu:0", "host")
                feeder = DeviceFeeder(stage, device=device, output="numpy" if on_host else "torch",
                                      name="bench-feeder")

                def take(t: float | None) -> Any:  # noqa: F811 - through the feeder
                    return feeder.get(timeout=t)

                result.extra["device"] = device
            try:
                while True:
                    w0 = time.perf_counter()
                    try:
                        batch = take(None if deadline is None else max(0.0, deadline - w0))
                    except OutOfRangeError:
                        break
                    except FeedqError as exc:
                        if type(exc).__name__ == "DeadlineExceededError":
                            result.stopped_by = "duration"
                            break
                        raise
                    now = time.perf_counter()
                    waited += now - w0
                    first = batch[0] if isinstance(batch, list) else batch
                    result.records += int(first.shape[0])
                    result.batches += 1
                    qs = stage.queue.statistics()
                    fill = qs.size / qs.capacity if qs.capacity > 0 else 0.0
                    fill_sum += fill
                    fill_max = max(fill_max, fill)
                    fs = files.queue.statistics()
                    fname_sum += fs.size / fs.capacity if fs.capacity > 0 else 0.0
                    samples += 1
                    if consume is not None:
                        consume(batch)
                    if max_records is not None and result.records >= max_records:
                        result.stopped_by = "records"
                        break
                    if deadline is not None and now >= deadline:
                        result.stopped_by = "duration"
                        break
                    if progress is not None and now - last_progress >= progress_every:
                        last_progress = now
                        _finish(result, t0, now, payload[0], waited, fill_sum, fill_max, fname_sum, samples,
                                reader_objs)
                        progress(result)
            finally:
                # Stop the clock before teardown; stop the pipeline first so a
                # feeder blocked on the stage wakes, then close the feeder.
                stopped_at[0] = time.perf_counter()
                pipe.stop()
                if feeder is not None:
                    feeder.close()
    except KeyboardInterrupt:
        result.stopped_by = "interrupted"
    finally:
        for r in reader_objs:
            close = getattr(r, "close", None)
            if close is not None:
                close()
    _finish(result, t0, stopped_at[0] or time.perf_counter(), payload[0], waited, fill_sum, fill_max, fname_sum,
            samples, reader_objs)
    return result


def _run_direct(
    paths: list[str],
    schema: Schema,
    *,
    batch_size: int,
    epochs: int | None,
    shuffle: bool,
    seed: int,
    duration: float | None,
    max_records: int | None,
    on_error: str,
    consume: Callable[[Any], None] | None,
    block_records: int,
) -> BenchResult:
    """One reader in the calling thread: read a block, decode it in one call,
    cut it into batches (views). No queues, no threads: the same loop as
    ``benchmarks/readers.py`` measures, so the two print the same figures."""
    from .queues import FIFOQueue

    result = BenchResult(format=schema.fmt, files=len(paths))
    result.extra["mode"] = "direct (one reader, no pipeline)"
    q = FIFOQueue(-1, str, shapes=[[]])
    rng = np.random.default_rng(seed)
    for _ in range(epochs if epochs is not None else 1):
        order = rng.permutation(len(paths)) if shuffle else range(len(paths))
        q.enqueue_many([[paths[i] for i in order]])
    q.close()
    reader = make_reader(schema, on_error)
    decode = make_decoder(schema)
    payload = 0
    t0 = time.perf_counter()
    deadline = None if duration is None else t0 + duration
    try:
        with reader:
            while True:
                try:
                    blk = reader.read_block(q, block_records)
                except OutOfRangeError:
                    break
                cols, nbytes = decode(blk)
                payload += nbytes
                k = len(blk)
                for s in range(0, k, batch_size):
                    batch = [c[s : s + batch_size] for c in cols]
                    result.records += int(batch[0].shape[0])
                    result.batches += 1
                    if consume is not None:
                        consume(batch if len(batch) > 1 else batch[0])
                if max_records is not None and result.records >= max_records:
                    result.stopped_by = "records"
                    break
                if deadline is not None and time.perf_counter() >= deadline:
                    result.stopped_by = "duration"
                    break
    except KeyboardInterrupt:
        result.stopped_by = "interrupted"
    _finish(result, t0, time.perf_counter(), payload, 0.0, 0.0, 0.0, 0.0, 0, [reader])
    return result


def _finish(result: BenchResult, t0: float, t1: float, payload: int, waited: float, fill_sum: float,
            fill_max: float, fname_sum: float, samples: int, readers: list[Any]) -> None:
    result.seconds = max(1e-9, t1 - t0)
    result.payload_bytes = payload
    result.records_per_s = result.records / result.seconds
    result.mb_per_s = payload / 1e6 / result.seconds
    result.consumer_wait_fraction = waited / result.seconds
    if samples:
        result.batch_queue_fill_mean = fill_sum / samples
        result.batch_queue_fill_max = fill_max
        result.filename_queue_fill_mean = fname_sum / samples
    result.skipped_errors = sum(r.num_errors_skipped() for r in readers)
