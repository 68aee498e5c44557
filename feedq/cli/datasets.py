"""Synthetic datasets for the demo, ``feedq make-data``, tests and benchmarks
(telling a file's format is ``feedq.cli._formats``).

Layout ``basic`` (the default) is the benchmark datasets:

* csv: header ``x0..x7,label``; 8 floats and an int label per line;
* tfrecord: ``tf.train.Example`` {``x``: 32 floats, ``label``: int64};
* fixed: 132-byte records: 32 little-endian float32 and an int32 label;
* parquet: columns ``x0..x7`` (float32) and ``label`` (int64);
* lines: plain text lines.

Layout ``realistic`` is what real files look like (csv and tfrecord only):

* tfrecord: variable-length Examples {``ids``: 0..20 int64 of varying
  magnitude, ``label``: int64 0..999, ``tag``: one 3..12-letter bytes value,
  ``x``: 32 floats}, serialised as TensorFlow serialises them with
  ``deterministic=True`` (packed lists, map entries in key order: TensorFlow's
  own order for a map is per process);
* csv: header ``id,x0..x7,label``; ids of 1 to 9 digits, floats of varying
  magnitude printed with 0 to 7 decimals, labels 0..999.

Every layout is a function of ``seed`` alone. Files are written under hidden
temporary names and renamed when all are complete: an interrupted run
leaves no half-written file, and no folder it created.
"""

from __future__ import annotations

import gzip
import os
import struct
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from feedq.cli._formats import FORMATS
from feedq.cli._images import IMAGE_CONTAINERS, make_image_dataset, synthetic_jpegs
from feedq.readers import masked_crc32c

__all__ = [
    "FIXED_RECORD_BYTES",
    "FORMATS",
    "IMAGE_CONTAINERS",
    "LAYOUTS",
    "encode_examples",
    "make_dataset",
    "make_image_dataset",
    "synthetic_jpegs",
]

LAYOUTS = ("basic", "realistic")
FIXED_RECORD_BYTES = 132  # 32 float32 + one int32 label
_SUFFIX = {"csv": ".csv", "tfrecord": ".tfrecord", "fixed": ".bin", "parquet": ".parquet", "lines": ".txt"}


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _ld(tag: int, payload: bytes) -> bytes:
    return bytes([tag]) + _varint(len(payload)) + payload


def encode_examples(x: np.ndarray, label: np.ndarray) -> list[bytes]:
    """Serialize ``tf.train.Example`` {x: float list, label: int64} records
    (protobuf wire format written directly: the layout is fixed)."""
    x = np.ascontiguousarray(x, dtype="<f4")
    width = x.shape[1]
    float_list = _ld(0x0A, b"\0" * (4 * width))  # packed repeated float, placeholder
    head = float_list[: len(float_list) - 4 * width]
    feature_x_prefix = bytes([0x12]) + _varint(len(float_list))  # Feature.float_list
    entry_x_prefix = _ld(0x0A, b"x") + bytes([0x12]) + _varint(len(feature_x_prefix) + len(float_list))
    entry_x_len = len(entry_x_prefix) + len(feature_x_prefix) + len(float_list)
    out = []
    raw = x.tobytes()
    step = 4 * width
    for i, lab in enumerate(label.tolist()):
        v = _varint(lab & 0xFFFFFFFFFFFFFFFF)
        int_list = _ld(0x0A, v)  # packed repeated int64
        feature_l = _ld(0x1A, int_list)  # Feature.int64_list
        entry_l = _ld(0x0A, b"label") + _ld(0x12, feature_l)
        entry_x = entry_x_prefix + feature_x_prefix + head + raw[i * step : (i + 1) * step]
        features = bytes([0x0A]) + _varint(entry_x_len) + entry_x + _ld(0x0A, entry_l)
        out.append(_ld(0x0A, features))
    return out


# Feature (feature.proto): bytes_list = 1, float_list = 2, int64_list = 3; each
# list's values are field 1, packed for floats and ints.
def _int64_feature(values: list[int]) -> bytes:
    return _ld(0x1A, _ld(0x0A, b"".join(_varint(v & 0xFFFFFFFFFFFFFFFF) for v in values)) if values else b"")


def _float_feature(raw: bytes) -> bytes:
    return _ld(0x12, _ld(0x0A, raw) if raw else b"")


def _bytes_feature(values: list[bytes]) -> bytes:
    return _ld(0x0A, b"".join(_ld(0x0A, v) for v in values))


def _example(features: list[tuple[bytes, bytes]]) -> bytes:
    """An Example from (name, serialized Feature) pairs, in the order given."""
    entries = b"".join(_ld(0x0A, _ld(0x0A, name) + _ld(0x12, feat)) for name, feat in features)
    return _ld(0x0A, entries)


def realistic_examples(n: int, rng: np.random.Generator) -> list[bytes]:
    """``n`` variable-length Examples of the ``realistic`` layout (see the
    module docstring), features in key order."""
    label = rng.integers(0, 1000, n)
    x = rng.standard_normal((n, 32), dtype=np.float32).astype("<f4")
    id_counts = rng.integers(0, 21, n)
    total = int(id_counts.sum())
    ids = (rng.random(total) * 10.0 ** rng.integers(1, 10, total)).astype(np.int64)
    id_ends = np.cumsum(id_counts)
    tag_lengths = rng.integers(3, 13, n)
    letters = rng.integers(ord("a"), ord("z") + 1, int(tag_lengths.sum()), dtype=np.uint8).tobytes()
    tag_ends = np.cumsum(tag_lengths)
    raw = x.tobytes()
    out = []
    id_list = ids.tolist()
    for i in range(n):
        a = int(id_ends[i] - id_counts[i])
        t = int(tag_ends[i] - tag_lengths[i])
        out.append(_example([
            (b"ids", _int64_feature(id_list[a : int(id_ends[i])])),
            (b"label", _int64_feature([int(label[i])])),
            (b"tag", _bytes_feature([letters[t : int(tag_ends[i])]])),
            (b"x", _float_feature(raw[i * 128 : (i + 1) * 128])),
        ]))
    return out


def _tfrecord_bytes(records: list[bytes]) -> bytes:
    parts = []
    for r in records:
        length = struct.pack("<Q", len(r))
        parts.append(length + struct.pack("<I", masked_crc32c(length)) + r + struct.pack("<I", masked_crc32c(r)))
    return b"".join(parts)


def _compress(data: bytes, compression: str | None) -> bytes:
    if not compression:
        return data
    c = compression.upper()
    if c == "GZIP":
        return gzip.compress(data, compresslevel=6, mtime=0)
    if c == "ZLIB":
        return zlib.compress(data, 6)
    raise ValueError(f"unknown compression {compression!r} (GZIP, ZLIB or none)")


def _csv_text(n: int, start: int, layout: str, rng: np.random.Generator) -> str:
    if layout == "basic":
        label = np.arange(start, start + n, dtype=np.int64) % 10
        x = rng.random((n, 8), dtype=np.float32)
        body = "\n".join(
            ",".join(f"{v:.5f}" for v in row) + f",{lab}" for row, lab in zip(x.tolist(), label.tolist())
        )
        return "x0,x1,x2,x3,x4,x5,x6,x7,label\n" + body + ("\n" if n else "")
    ids = (rng.random(n) * 10.0 ** rng.integers(1, 10, n)).astype(np.int64)
    xs = rng.standard_normal((n, 8)) * 10.0 ** rng.integers(-2, 4, (n, 8))
    digits = rng.integers(0, 8, (n, 8))
    labels = rng.integers(0, 1000, n)
    lines = ["id,x0,x1,x2,x3,x4,x5,x6,x7,label"]
    for i, row, ds, lab in zip(ids.tolist(), xs.tolist(), digits.tolist(), labels.tolist()):
        lines.append(f"{i}," + ",".join(f"{v:.{d}f}" for v, d in zip(row, ds)) + f",{lab}")
    return "\n".join(lines) + "\n"


def _write_file(path: Path, fmt: str, layout: str, n: int, start: int, compression: str | None,
                rng: np.random.Generator) -> None:
    """Write one file of ``n`` records (``start``: the first record's number)."""
    if fmt == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        x = rng.random((n, 8), dtype=np.float32)
        cols: dict[str, Any] = {f"x{j}": x[:, j] for j in range(8)}
        cols["label"] = np.arange(start, start + n, dtype=np.int64) % 10
        pq.write_table(pa.table(cols), path, row_group_size=max(1, min(n, 65536)),
                       compression=compression.lower() if compression else None)
        return
    if fmt == "csv":
        data = _csv_text(n, start, layout, rng).encode()
    elif fmt == "tfrecord":
        if layout == "realistic":
            data = _tfrecord_bytes(realistic_examples(n, rng))
        else:
            label = np.arange(start, start + n, dtype=np.int64) % 10
            x = rng.random((n, 32), dtype=np.float32)
            data = _tfrecord_bytes(encode_examples(x, label))
    elif fmt == "fixed":
        rec = np.zeros(n, dtype=[("x", "<f4", (32,)), ("label", "<i4")])
        rec["x"] = rng.random((n, 32), dtype=np.float32)
        rec["label"] = np.arange(start, start + n, dtype=np.int64) % 10
        data = rec.tobytes()
    else:
        words = ["alpha", "beta", "gamma", "delta", "epsilon"]
        data = ("\n".join(f"{words[j % 5]} line {j}" for j in range(n)) + ("\n" if n else "")).encode()
    path.write_bytes(_compress(data, compression))


def make_dataset(
    folder: str | os.PathLike[str],
    fmt: str,
    records: int,
    *,
    files: int = 1,
    compression: str | None = None,
    seed: int = 0,
    layout: str = "basic",
    overwrite: bool = False,
) -> list[str]:
    """Write ``records`` synthetic records of format ``fmt`` into ``files`` files
    named ``part-00000<ext>``... in ``folder`` (created when missing).

    All files are written under hidden temporary names first and renamed when
    every one is complete; on any error or KeyboardInterrupt the temporary
    files, any file already renamed into a folder this call created, and
    that folder are removed.

    Args:
        compression: ``GZIP`` or ``ZLIB`` (any case); for parquet a Parquet
            codec such as ``snappy``.
        layout: ``basic`` or ``realistic`` (csv and tfrecord; see the module docstring).
        overwrite: replace files of the same names; otherwise they are an error.

    Returns:
        The paths written, in order.

    Raises:
        FileExistsError: a file to write exists (``overwrite=False``), or
            ``folder`` is a file.
        ValueError: an unknown format, layout or compression, a layout the
            format does not have, or negative counts.
    """
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; choose from {', '.join(FORMATS)}")
    if layout not in LAYOUTS:
        raise ValueError(f"unknown layout {layout!r}; choose from {', '.join(LAYOUTS)}")
    if layout == "realistic" and fmt not in ("csv", "tfrecord"):
        raise ValueError(f"layout 'realistic' is for csv and tfrecord, not {fmt}")
    if records < 0 or files < 1:
        raise ValueError("records must be >= 0 and files >= 1")
    if compression and fmt != "parquet":
        _compress(b"", compression)  # an unknown compression fails before anything is written
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise FileExistsError(f"{folder} exists and is not a folder")
    suffix = _SUFFIX[fmt]
    if compression and fmt != "parquet":
        suffix += ".gz" if compression.upper() == "GZIP" else ".zz"
    targets = [folder / f"part-{i:05d}{suffix}" for i in range(files)]
    if not overwrite:
        existing = [t for t in targets if os.path.lexists(t)]
        if existing:
            more = f" (and {len(existing) - 1} more of the files to write)" if len(existing) > 1 else ""
            raise FileExistsError(f"{existing[0]} exists{more}")
    missing: list[Path] = []
    p = folder
    while not p.exists():
        missing.append(p)
        p = p.parent
    rng = np.random.default_rng(seed)
    per_file = [records // files + (1 if i < records % files else 0) for i in range(files)]
    created: list[Path] = []
    temps: list[Path] = []
    renamed: list[Path] = []
    try:
        for d in reversed(missing):  # outermost first
            created.append(d)
            d.mkdir()
        start = 0
        for target, n in zip(targets, per_file):
            tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
            temps.append(tmp)
            _write_file(tmp, fmt, layout, n, start, compression, rng)
            start += n
        for tmp, target in zip(temps, targets):
            os.replace(tmp, target)
            renamed.append(target)
    except BaseException:
        for tmp in temps:
            tmp.unlink(missing_ok=True)
        if created:  # a folder of ours: nothing of this run stays in it
            for target in renamed:
                target.unlink(missing_ok=True)
        for d in reversed(created):  # innermost first
            try:
                d.rmdir()
            except OSError:
                pass
        raise
    return [str(t) for t in targets]
