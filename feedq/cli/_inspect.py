"""``feedq inspect``: a file's record count, inferred schema and first records.

The report is plain JSON values (numbers, strings, lists, dicts), so that
``--json`` prints it as is and the text form renders the same data:
float32 values as their shortest decimal, bytes as text (undecodable bytes
escaped), Example features decoded to their value lists. SequenceExample
records show their context features the same way and their feature lists
(``"feature_lists"``: per list its kind and the values of each step).
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np

from feedq.cli._decode import Decoder
from feedq.cli._schema import (
    OnError,
    Schema,
    blocks_of,
    example_features,
    infer_schema,
    make_reader,
    sequence_feature_lists,
)
from feedq.errors import InvalidArgumentError
from feedq.readers import example_class

__all__ = ["inspect_file", "render_text"]

_BLOCK = 65536
_TEXT_LIMIT = 200  # characters of a bytes value shown
_SHOWN_VALUES = 8  # list values shown per feature in the text form


def inspect_file(
    path: str,
    fmt: str,
    compression: str | None,
    *,
    record_bytes: int | None,
    sample: int,
    head: int,
    on_error: OnError,
) -> dict[str, Any]:
    """Read ``path`` once: count its records, infer its schema from the
    first ``sample`` records, decode the first ``head``.

    Raises:
        FeedqError: an unreadable file or record (``on_error="raise"``).
    """
    schema = infer_schema([path], fmt, compression, record_bytes, on_error=on_error, sample=sample)
    reader = make_reader(schema, on_error, name="inspect")
    # Every record is decoded, so a malformed row past the sample is
    # reported (or skipped and counted) as the pipeline would; the records
    # shown go through a decoder of their own (their skips are counted once).
    decoder = Decoder(schema, on_error)
    shown = Decoder(schema, on_error)
    count = 0
    first: list[dict[str, Any]] = []
    with reader:
        for block in blocks_of(reader, [path], _BLOCK):
            decoded = decoder.decode(block)
            kept = decoded[2]
            if len(first) < head:
                first.extend(_records(schema, shown, block, head - len(first), on_error, decoded))
            count += len(block) if kept is None else len(kept)
        skipped = int(reader.num_errors_skipped())
    return {
        "file": path,
        "format": fmt,
        "compression": compression or "none",
        "records": count,
        "skipped_errors": skipped + decoder.skipped,
        "sample": {"records": schema.sampled, "skipped": schema.sample_skipped},
        "schema": {n: _type_name(d, s) for n, d, s in zip(schema.names, schema.dtypes, schema.shapes)},
        "info": schema.info,
        "first_records": first,
    }


def _type_name(dtype: Any, shape: list[int | None]) -> str:
    name = "string" if dtype in (str, bytes, object) else np.dtype(dtype).name
    return name + (str(list(shape)) if shape else "")


def json_value(v: Any) -> Any:
    """A decoded value as plain JSON: numbers, strings, lists."""
    if isinstance(v, np.ndarray):
        return [json_value(x) for x in v]
    if isinstance(v, (list, tuple)):
        return [json_value(x) for x in v]
    if isinstance(v, (bytes, np.bytes_)):
        text = bytes(v).decode("utf-8", "backslashreplace")
        return text if len(text) <= _TEXT_LIMIT else text[: _TEXT_LIMIT - 3] + "..."
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if isinstance(v, (int, np.integer)):
        return int(v)
    if isinstance(v, (float, np.floating)):
        # float32 as its shortest decimal (0.1, not 0.10000000149011612)
        f = float(str(v)) if isinstance(v, np.float32) else float(v)
        return f if math.isfinite(f) else str(f)  # JSON has no NaN / Infinity
    return v if v is None or isinstance(v, str) else str(v)


def _records(schema: Schema, decoder: Decoder, block: Any, n: int, on_error: OnError,
             decoded: tuple[list[np.ndarray], np.ndarray, np.ndarray | None] | None = None,
             ) -> list[dict[str, Any]]:
    """The first ``n`` records of ``block`` as ``{"key": ..., "value": ...}``
    (CSV rows: the first ``n`` good ones of the block as ``decoded``, what
    ``Decoder.decode(block)`` returned, when given)."""
    if decoded is not None and schema.fmt == "csv":
        cols, _, kept = decoded
        index = (np.arange(len(block)) if kept is None else kept)[:n]
        all_keys = block.keys()
        return [{"key": all_keys[j].decode("utf-8", "backslashreplace"),
                 "value": {name: json_value(c[i]) for name, c in zip(schema.names, cols)}}
                for i, j in enumerate(index.tolist())]
    keys = [k.decode("utf-8", "backslashreplace") for k in block.keys()[:n].tolist()]
    if schema.fmt == "tfrecord" and (schema.features or schema.info.get("sequence")):
        return _examples(decoder, block, keys, on_error, bool(schema.info.get("sequence")))
    if schema.fmt == "tfrecord" or schema.fmt == "lines":
        field = "text" if schema.fmt == "lines" else "bytes"
        return [{"key": k, "value": {"length": len(r), field: json_value(r)}}
                for k, r in zip(keys, block.values()[:n].tolist())]
    if schema.fmt == "fixed":
        return [{"key": k, "value": {"length": len(r), "hex": r[:32].hex() + ("..." if len(r) > 32 else "")}}
                for k, r in zip(keys, block.values()[:n].tolist())]
    cols, _, kept = decoder.decode(block, limit=n)
    if kept is not None:  # bad rows skipped
        keys = [keys[i] for i in kept.tolist()]
    return [{"key": k, "value": {name: json_value(c[i]) for name, c in zip(schema.names, cols)}}
            for i, k in enumerate(keys)]


def _shown(kind: str, values: list[Any]) -> Any:
    # FloatList values are float32: show them as such (0.1, not 0.10000000149011612)
    return json_value(np.asarray(values, dtype=np.float32) if kind == "float_list" else values)


def _examples(decoder: Decoder, block: Any, keys: list[str], on_error: OnError,
              sequence: bool = False) -> list[dict[str, Any]]:
    from google.protobuf.message import DecodeError

    cls = example_class()
    out = []
    for i, (key, rec) in enumerate(zip(keys, block.values()[: len(keys)].tolist())):
        msg = cls()
        try:
            msg.ParseFromString(rec)
        except DecodeError:
            if on_error == "raise":
                raise InvalidArgumentError(f"{decoder.where(block, i)}: not a tf.train.Example") from None
            continue
        value = {name: {"kind": kind, "values": _shown(kind, values)}
                 for name, (kind, values) in example_features(msg).items()}
        entry: dict[str, Any] = {"key": key, "value": value}
        if sequence:
            entry["feature_lists"] = {
                name: {"kind": kind, "values": [_shown(kind, step) for step in steps]}
                for name, (kind, steps) in sequence_feature_lists(rec).items()
            }
        out.append(entry)
    return out


def render_text(report: dict[str, Any]) -> list[str]:
    """The report as lines of text."""
    comp = report["compression"]
    lines = [f"{report['file']}: {report['format']}{'' if comp == 'none' else f' ({comp})'}, "
             f"{report['records']:,} records"
             + (f", {report['skipped_errors']:,} bad records/files skipped" if report["skipped_errors"] else "")]
    info = report["info"]
    sample = report["sample"]
    features = info.get("features", {})
    if report["format"] in ("csv", "tfrecord") and sample["records"]:
        lines.append(f"schema (union of the first {sample['records']:,} records):")
    else:
        lines.append("schema:")
    width = max((len(f"{n}: {t}") for n, t in report["schema"].items()), default=0)
    for name, type_name in report["schema"].items():
        text = f"  {name}: {type_name}"
        feat = features.get(name)
        if feat is not None:
            text = text.ljust(width + 4) + _feature_text(feat, sample["records"])
        elif name in info.get("columns", {}) and report["format"] == "parquet":
            text = text.ljust(width + 4) + f"parquet {info['columns'][name]}"
        lines.append(text)
    if info.get("header"):
        lines.append("  (a header line per file: the column names)")
    if info.get("sequence"):
        lines.append("  (tf.train.SequenceExample records: the schema is their context features)")
        lines.append("feature lists:")
        for name, feat in info["feature_lists"].items():
            lines.append(f"  {name}: {_feature_list_text(feat, sample['records'])}")
    elif info.get("examples") is False:
        lines.append("  (records are not tf.train.Example: raw bytes)")
    for k in ("rows", "row_groups"):
        if k in info:
            lines.append(f"  {k.replace('_', ' ')}: {info[k]:,}")
    first = report["first_records"]
    if first:
        lines.append(f"first {len(first)} record{'s' if len(first) != 1 else ''}:")
        for rec in first:
            value = rec["value"]
            if report["format"] == "tfrecord" and (features or "feature_lists" in rec):
                lines.append(f"  {rec['key']}")
                for name, feat in value.items():
                    lines.append(f"    {name}: {_list_text(feat['values'])}")
                for name, feat in rec.get("feature_lists", {}).items():
                    steps = feat["values"]
                    lines.append(f"    {name}: {len(steps)} step{'s' if len(steps) != 1 else ''} "
                                 + _list_text([_Raw(_list_text(v)) for v in steps]))
            else:
                lines.append(f"  {rec['key']}: {json.dumps(value)}")
    return lines


def _feature_text(feat: dict[str, Any], sampled: int) -> str:
    values = feat["values"]
    count = f"{values} value{'s' if values != 1 else ''}" if isinstance(values, int) \
        else f"{values[0]}..{values[1]} values"
    text = f"{feat['kind']}, {count}"
    if "in_records" in feat:
        text += f", in {feat['in_records']:,} of {sampled:,} records"
    if "kinds" in feat:
        text += f", kinds seen: {feat['kinds']}"
    return text


def _feature_list_text(feat: dict[str, Any], sampled: int) -> str:
    def span(v: Any, unit: str) -> str:
        return f"{v} {unit}{'s' if v != 1 else ''}" if isinstance(v, int) else f"{v[0]}..{v[1]} {unit}s"

    text = f"{feat['kind']}, {span(feat['steps'], 'step')}, {span(feat['values'], 'value')} per step"
    if "in_records" in feat:
        text += f", in {feat['in_records']:,} of {sampled:,} records"
    if "kinds" in feat:
        text += f", kinds seen: {feat['kinds']}"
    return text


class _Raw(str):
    """Text shown as is by :func:`_list_text` (a nested list already rendered)."""


def _list_text(values: list[Any]) -> str:
    shown = ", ".join(v if isinstance(v, _Raw) else json.dumps(v) for v in values[:_SHOWN_VALUES])
    if len(values) > _SHOWN_VALUES:
        return f"[{shown}, ...] ({len(values)} values)"
    return f"[{shown}]"
