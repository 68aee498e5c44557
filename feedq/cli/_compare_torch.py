"""The ``DataLoader`` rows of ``feedq bench --compare`` (see ``feedq.cli._compare``):
per-record reading and decoding in Python, as a ``torch.utils.data`` user
writes it, batched by a ``DataLoader`` with 0 or more workers.

torch is an optional extra, imported only when a row runs.
"""

from __future__ import annotations

import csv
import gzip
import io
import itertools
import random
import zlib
from collections.abc import Callable, Iterator
from typing import IO, Any, TypeVar, cast

import numpy as np

from feedq.cli._measure import Limits, System, timed
from feedq.cli._schema import Schema

T = TypeVar("T")

__all__ = ["Collate", "Records", "shuffle_buffered", "torch_system"]


# -- torch DataLoader ----------------------------------------------------------------------------


def torch_system(files: list[str], schema: Schema, workers: int, what: str) -> System:
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
        yield from shuffle_buffered(self._records(mine), self.shuffle_buffer, rng)

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
        from feedq.readers import VarLenFeature, example_class

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


def shuffle_buffered(items: Iterator[T], size: int, rng: random.Random) -> Iterator[T]:
    """``items`` through a shuffle buffer of ``size`` (0: as they come): each
    item past the first ``size`` replaces a random one, which is yielded; the
    rest come out shuffled at the end (what a DataLoader user writes)."""
    if not size:
        yield from items
        return
    buffer: list[T] = []
    for item in items:
        if len(buffer) < size:
            buffer.append(item)
            continue
        i = rng.randrange(len(buffer))
        yield buffer[i]
        buffer[i] = item
    rng.shuffle(buffer)
    yield from buffer
