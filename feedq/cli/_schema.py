"""Schema inference for ``feedq bench`` and ``feedq inspect``.

A schema is inferred from a sample: the first ``sample`` readable records
across the files, in order (default 1,000), and it is the union of what they
hold -- a feature or a float that record 0 lacks still counts:

* csv: the field count most lines have; a header when the first line of the
  first file is all text while data rows hold numbers; per column int32
  (int64 past int32's range) when every sampled number is an integer,
  float32 when some are not, string when most values are not numbers (text
  in a column of numbers makes that row malformed). Empty fields take the
  default.
* tfrecord: ``tf.train.Example`` features. A feature present in every sampled
  record with the same value count is a ``FixedLenFeature``; one missing from
  some records or with varying counts is a ``VarLenFeature``. Records that
  are not Examples make it a raw-record schema (lengths only). Records that
  are ``tf.train.SequenceExample`` (feature lists in some record) have their
  context features as the schema (a raw-record one without context) and
  their feature lists described in ``info["feature_lists"]``: kind, steps
  per record and values per step (decoded by nothing here).
* parquet: the columns of the first readable file.
* fixed, lines: nothing to infer.

With ``on_error="skip"`` unreadable files and records are skipped while
sampling (a corrupt first file does not stop a run); with ``"raise"`` the
first one raises. Rows and records the schema does not fit are not errors
here: the decoder reports them, naming file and line (see ``feedq.cli._decode``).
"""

from __future__ import annotations

import csv
import re
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import numpy as np

from feedq.errors import DataLossError, FeedqError, NotFoundError, OutOfRangeError
from feedq.queues import FIFOQueue
from feedq.readers import (
    FixedLenFeature,
    FixedLengthRecordReader,
    ParquetReader,
    TextLineReader,
    TFRecordReader,
    VarLenFeature,
    example_class,
    sequence_example_class,
)

__all__ = ["DEFAULT_SAMPLE", "Schema", "infer_schema", "make_reader"]

DEFAULT_SAMPLE = 1000
OnError = Literal["raise", "skip"]
_INT_RE = re.compile(r"\s*[+-]?[0-9]+\s*")
_INT32_MAX = 2**31 - 1
_KIND_DTYPE: dict[str, Any] = {"float_list": np.float32, "int64_list": np.int64, "bytes_list": str}


@dataclass
class Schema:
    """What a reader thread produces for one format.

    Attributes:
        fmt: ``csv``, ``tfrecord``, ``fixed``, ``parquet``, ``lines`` or
            ``images`` (see :mod:`feedq.cli._imageset`).
        compression: ``GZIP``, ``ZLIB`` or None.
        names, dtypes, shapes: the decoded components (``None`` in a shape:
            a variable-length dimension, padded per batch).
        skip_header_lines: CSV header lines per file.
        record_defaults: CSV ``decode_csv`` defaults.
        features: Example features for ``parse_example``.
        record_bytes: fixed-length record size.
        info: what was found, JSON-ready (``feedq inspect`` prints it).
        sampled: records the schema was inferred from.
        sample_skipped: files and records skipped while sampling.
        widths: the most values a ``VarLenFeature`` had in the sample.
        pad_varlen: decode variable-length features padded to ``widths``
            (fixed shapes, for queues that cannot pad per batch, such as
            shuffle_batch's): a record with more values is a bad record.
        images: for format ``images``, the dataset
            (:class:`feedq.cli._imageset.ImageSet`).
    """

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
    sampled: int = 0
    sample_skipped: int = 0
    widths: dict[str, int] = field(default_factory=dict)
    pad_varlen: bool = False
    images: Any = None

    def padded(self) -> Schema:
        """This schema with variable-length features padded to their sampled widths."""
        shapes: list[list[int | None]] = [
            [self.widths[n]] if s == [None] else s for n, s in zip(self.names, self.shapes)
        ]
        return replace(self, shapes=shapes, pad_varlen=True)


def make_reader(schema: Schema, on_error: OnError, name: str | None = None) -> Any:
    """A reader for ``schema``'s format (errors raised or skipped per ``on_error``)."""
    if schema.fmt == "images":
        from feedq.cli._imageset import make_image_reader

        return make_image_reader(schema, on_error, name)
    if schema.fmt in ("csv", "lines"):
        return TextLineReader(skip_header_lines=schema.skip_header_lines, compression=schema.compression,
                              on_error=on_error, name=name)
    if schema.fmt == "tfrecord":
        return TFRecordReader(options=schema.compression or "", on_error=on_error, name=name)
    if schema.fmt == "fixed":
        return FixedLengthRecordReader(schema.record_bytes or 132, encoding=schema.compression,
                                       on_error=on_error, name=name)
    return ParquetReader(columns=schema.names or None, on_error=on_error, name=name)


def infer_schema(
    paths: list[str],
    fmt: str,
    compression: str | None,
    record_bytes: int | None = None,
    *,
    on_error: OnError = "raise",
    sample: int = DEFAULT_SAMPLE,
) -> Schema:
    """The schema of the files ``paths`` (format ``fmt``), from their first
    ``sample`` readable records.

    Raises:
        FeedqError: no readable record to infer it from; with
            ``on_error="raise"``, the first unreadable file or record
            (``NotFoundError``, ``DataLossError``).
        ValueError: an unknown format or ``sample < 1``.
    """
    if sample < 1:
        raise ValueError(f"sample must be >= 1, got {sample}")
    if fmt == "csv":
        return _csv_schema(paths, compression, on_error, sample)
    if fmt == "tfrecord":
        return _tfrecord_schema(paths, compression, on_error, sample)
    if fmt == "parquet":
        return _parquet_schema(paths, on_error)
    if fmt == "fixed":
        rb = record_bytes or 132
        return Schema("fixed", compression, ["record"], [np.uint8], [[rb]], record_bytes=rb)
    if fmt == "lines":
        return Schema("lines", compression, ["length"], [np.int64], [[]])
    raise ValueError(f"unknown format {fmt!r}")


def blocks_of(reader: Any, paths: list[str], n: int | Callable[[], int]) -> Iterator[Any]:
    """The blocks ``reader`` reads from ``paths`` (in order, once each), of at
    most ``n`` records (or ``n()``, asked before each read), until the files
    end. The caller opens and closes the reader."""
    q = FIFOQueue(-1, str, shapes=[[]])
    q.enqueue_many([list(paths)])
    q.close()
    while True:
        try:
            yield reader.read_block(q, n() if callable(n) else n)
        except OutOfRangeError:
            return


def _sample(paths: list[str], reader: Any, n: int) -> tuple[list[tuple[str, int, bytes]], int]:
    """The first ``n`` records ``reader`` gives over ``paths``, as
    ``(file, key id, record)``, and the errors it skipped."""
    out: list[tuple[str, int, bytes]] = []
    if n <= 0:
        return out, 0
    with reader:
        for block in blocks_of(reader, paths, lambda: n - len(out)):
            wu = block.work_unit.decode("utf-8", "backslashreplace")
            out.extend((wu, k, v) for k, v in zip(block.key_ids.tolist(), block.values().tolist()))
            if len(out) >= n:
                break
        skipped = int(reader.num_errors_skipped())
    return out, skipped


def _no_records(paths: list[str], skipped: int) -> FeedqError:
    where = paths[0] if len(paths) == 1 else f"{paths[0]} (and {len(paths) - 1} more files)"
    why = f"; {skipped} unreadable files or records skipped" if skipped else ""
    return FeedqError(f"{where}: no records to infer a schema from{why}")


# -- CSV ------------------------------------------------------------------------------------


def _field_kind(text: str) -> str:
    t = text.strip()
    if not t:
        return "empty"
    if _INT_RE.fullmatch(t):
        return "int"
    if "_" not in t:  # Python's float() takes "1_0"; TF does not
        try:
            float(t)
            return "float"
        except ValueError:
            pass
    return "string"


def _split(line: bytes) -> list[str]:
    text = line.decode("utf-8", "replace")
    return next(csv.reader([text]), []) if text else [""]


def _csv_schema(paths: list[str], compression: str | None, on_error: OnError, sample: int) -> Schema:
    reader = TextLineReader(compression=compression, on_error=on_error, name="schema inference")
    # Up to one header line per file comes on top of the data rows asked for.
    records, skipped = _sample(paths, reader, sample + len(paths))
    if not records:
        raise _no_records(paths, skipped)
    rows = [(wu, line, _split(rec)) for wu, line, rec in records]
    ncols = Counter(len(fields) for _, _, fields in rows).most_common(1)[0][0]
    fitting = [r for r in rows if len(r[2]) == ncols]
    firsts = [r for r in fitting if r[1] == 1]
    others = [r for r in fitting if r[1] != 1]
    first = firsts[0][2] if firsts else None
    header = (
        first is not None
        and all(_field_kind(h) == "string" for h in first)
        and any(_field_kind(v) in ("int", "float") for r in others for v in r[2])
    )
    data = others if header else fitting
    data = data[:sample]
    names = list(first) if header and first is not None else [f"c{i}" for i in range(ncols)]
    kinds: list[str] = []
    for c in range(ncols):
        seen = Counter(_field_kind(r[2][c]) for r in data)
        seen.pop("empty", None)
        numbers = seen["int"] + seen["float"]
        # Text in a column of numbers is a malformed row (skipped or
        # reported by the decoder), unless text is the rule there.
        if not numbers or seen["string"] > numbers:
            kinds.append("string")
        elif not seen["float"]:
            wide = any(abs(int(r[2][c])) > _INT32_MAX for r in data if _field_kind(r[2][c]) == "int")
            kinds.append("int64" if wide else "int32")
        else:
            kinds.append("float32")
    defaults: list[Any] = [
        [np.int64(0)] if k == "int64" else [0] if k == "int32" else [0.0] if k == "float32" else [""]
        for k in kinds
    ]
    dtypes: list[Any] = [
        np.int64 if k == "int64" else np.int32 if k == "int32" else np.float32 if k == "float32" else str
        for k in kinds
    ]
    return Schema("csv", compression, names, dtypes, [[] for _ in names], skip_header_lines=int(header),
                  record_defaults=defaults, info={"header": header, "columns": dict(zip(names, kinds))},
                  sampled=len(data), sample_skipped=skipped + len(rows) - len(fitting))


# -- TFRecord ---------------------------------------------------------------------------------


@dataclass
class _FeatureStats:
    kinds: Counter[str] = field(default_factory=Counter)
    present: int = 0
    min_values: int = 0
    max_values: int = 0


def example_features(message: Any) -> dict[str, tuple[str, list[Any]]]:
    """A parsed ``tf.train.Example``'s features: name -> (kind, values), sorted by name."""
    out: dict[str, tuple[str, list[Any]]] = {}
    for name in sorted(message.features.feature):
        feat = message.features.feature[name]
        kind = feat.WhichOneof("kind") or "empty"
        values = list(getattr(feat, kind).value) if kind != "empty" else []
        out[name] = (kind, values)
    return out


def sequence_feature_lists(record: bytes) -> dict[str, tuple[str, list[list[Any]]]]:
    """A record's ``tf.train.SequenceExample`` feature lists: name -> (kind,
    values per step), sorted by name; empty for a plain Example or a record
    that is not a SequenceExample."""
    from google.protobuf.message import DecodeError

    msg = sequence_example_class()()
    try:
        msg.ParseFromString(record)
    except DecodeError:
        return {}
    out: dict[str, tuple[str, list[list[Any]]]] = {}
    lists = msg.feature_lists.feature_list
    for name in sorted(lists):
        steps = [(f.WhichOneof("kind") or "empty", f) for f in lists[name].feature]
        kinds = [k for k, _ in steps if k != "empty"]
        kind = Counter(kinds).most_common(1)[0][0] if kinds else "empty"
        out[name] = (kind, [list(getattr(f, k).value) if k != "empty" else [] for k, f in steps])
    return out


@dataclass
class _ListStats:
    kinds: Counter[str] = field(default_factory=Counter)
    present: int = 0
    steps: list[int] = field(default_factory=list)  # min, max
    values: list[int] = field(default_factory=list)  # min, max per step


def _span(lo_hi: list[int]) -> int | list[int]:
    return lo_hi[0] if lo_hi[0] == lo_hi[1] else list(lo_hi)


def _feature_list_info(records: list[bytes]) -> dict[str, Any]:
    """``info["feature_lists"]`` of SequenceExample records (empty: none has any)."""
    stats: dict[str, _ListStats] = {}
    for rec in records:
        for name, (kind, steps) in sequence_feature_lists(rec).items():
            s = stats.setdefault(name, _ListStats())
            if kind != "empty":
                s.kinds[kind] += 1
            s.present += 1
            n = len(steps)
            s.steps = [min(s.steps[0], n), max(s.steps[1], n)] if s.steps else [n, n]
            for v in steps:
                s.values = [min(s.values[0], len(v)), max(s.values[1], len(v))] if s.values \
                    else [len(v), len(v)]
    out: dict[str, Any] = {}
    for name in sorted(stats):
        s = stats[name]
        entry: dict[str, Any] = {"kind": s.kinds.most_common(1)[0][0] if s.kinds else "empty",
                                 "steps": _span(s.steps), "values": _span(s.values or [0, 0])}
        if s.present < len(records):
            entry["in_records"] = s.present
        if len(s.kinds) > 1:
            entry["kinds"] = dict(s.kinds)
        out[name] = entry
    return out


def _tfrecord_schema(paths: list[str], compression: str | None, on_error: OnError, sample: int) -> Schema:
    from google.protobuf.message import DecodeError

    reader = TFRecordReader(options=compression or "", on_error=on_error, name="schema inference")
    records, skipped = _sample(paths, reader, sample)
    if not records:
        raise _no_records(paths, skipped)
    cls = example_class()
    parsed: list[dict[str, tuple[str, list[Any]]]] = []
    good: list[bytes] = []
    bad = 0
    for _, _, rec in records:
        msg = cls()
        try:
            msg.ParseFromString(rec)
        except DecodeError:
            bad += 1
            continue
        parsed.append(example_features(msg))
        good.append(rec)
    has_features = any(p for p in parsed)
    # Raise mode keeps the strict rule: any record that is not an Example
    # makes the file raw records. Skip mode lets bad records go.
    examples = bad == 0 or on_error == "skip"
    # A SequenceExample's context parses as an Example's features; its
    # feature lists are a field an Example does not have.
    lists = _feature_list_info(good) if examples and parsed else {}
    if not (examples and has_features):
        info: dict[str, Any] = {"examples": False}
        if lists:
            info.update(sequence=True, features={}, feature_lists=lists)
        return Schema("tfrecord", compression, ["bytes"], [np.int64], [[]], info=info,
                      sampled=len(good) if lists else len(records),
                      sample_skipped=skipped + bad if lists else skipped)
    stats: dict[str, _FeatureStats] = {}
    for feats in parsed:
        for name, (kind, values) in feats.items():
            s = stats.get(name)
            if s is None:
                s = stats[name] = _FeatureStats(min_values=len(values), max_values=len(values))
            if kind != "empty":
                s.kinds[kind] += 1
            s.present += 1
            s.min_values = min(s.min_values, len(values))
            s.max_values = max(s.max_values, len(values))
    for s in stats.values():
        if s.present < len(parsed):  # missing from some records: 0 values there
            s.min_values = 0
    names = sorted(stats)
    features: dict[str, Any] = {}
    dtypes: list[Any] = []
    shapes: list[list[int | None]] = []
    widths: dict[str, int] = {}
    features_info: dict[str, Any] = {}
    for n in names:
        s = stats[n]
        kind = s.kinds.most_common(1)[0][0] if s.kinds else "float_list"
        dtype = _KIND_DTYPE[kind]
        fixed = s.present == len(parsed) and s.min_values == s.max_values >= 1 and len(s.kinds) == 1
        entry: dict[str, Any] = {"kind": kind}
        if fixed:
            shape: list[int | None] = [] if s.max_values == 1 else [s.max_values]
            features[n] = FixedLenFeature([d for d in shape if d is not None], dtype)
            entry["values"] = s.max_values
        else:
            shape = [None]
            features[n] = VarLenFeature(dtype)
            widths[n] = max(1, s.max_values)
            entry["values"] = [s.min_values, s.max_values]
        if s.present < len(parsed):
            entry["in_records"] = s.present
        if len(s.kinds) > 1:
            entry["kinds"] = dict(s.kinds)
        dtypes.append(dtype)
        shapes.append(shape)
        features_info[n] = entry
    info = {"examples": True, "features": features_info}
    if lists:
        info.update(sequence=True, feature_lists=lists)
    return Schema("tfrecord", compression, names, dtypes, shapes, features=features,
                  info=info, sampled=len(parsed), sample_skipped=skipped + bad, widths=widths)


# -- Parquet ----------------------------------------------------------------------------------


def _parquet_schema(paths: list[str], on_error: OnError) -> Schema:
    import pyarrow as pa
    import pyarrow.parquet as pq

    skipped = 0
    for path in paths:
        try:
            pf = pq.ParquetFile(path)
        except FileNotFoundError:
            err: FeedqError = NotFoundError(f"{path}; No such file or directory")
        except (pa.ArrowInvalid, OSError) as exc:
            err = DataLossError(f"{path}: not a readable Parquet file: {exc}")
        else:
            names, dtypes = [], []
            for f in pf.schema_arrow:
                names.append(f.name)
                try:
                    dtypes.append(np.dtype(f.type.to_pandas_dtype()))
                except (NotImplementedError, TypeError):
                    dtypes.append(str)
            return Schema("parquet", None, names, dtypes, [[] for _ in names],
                          info={"rows": pf.metadata.num_rows, "row_groups": pf.metadata.num_row_groups,
                                "columns": {n: str(f.type) for n, f in zip(names, pf.schema_arrow)}},
                          sample_skipped=skipped)
        if on_error == "raise":
            raise err
        skipped += 1
    raise _no_records(paths, skipped)
