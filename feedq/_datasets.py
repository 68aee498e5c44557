"""Synthetic datasets for the demo, ``feedq make-data``, tests and benchmarks,
and format detection for ``feedq bench`` / ``feedq inspect``.

The layouts match the benchmark datasets:

* csv: header ``x0..x7,label``; 8 floats and an int label per line;
* tfrecord: ``tf.train.Example`` {``x``: 32 floats, ``label``: int64};
* fixed: 132-byte records: 32 little-endian float32 and an int32 label;
* parquet: columns ``x0..x7`` (float32) and ``label`` (int64);
* lines: plain text lines.
"""

from __future__ import annotations

import gzip
import os
import struct
import zlib
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "FIXED_RECORD_BYTES",
    "FORMATS",
    "detect_format",
    "encode_examples",
    "make_dataset",
]

FORMATS = ("csv", "tfrecord", "fixed", "parquet", "lines")
FIXED_RECORD_BYTES = 132  # 32 float32 + one int32 label
_EXT = {
    ".csv": "csv", ".tsv": "csv",
    ".tfrecord": "tfrecord", ".tfrecords": "tfrecord", ".tfr": "tfrecord",
    ".bin": "fixed", ".fixed": "fixed", ".rec": "fixed",
    ".parquet": "parquet", ".pq": "parquet",
    ".txt": "lines", ".lines": "lines", ".log": "lines",
}


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


def _masked_crc(data: bytes) -> int:
    from .readers._crc import masked_crc32c

    return masked_crc32c(data)


def _tfrecord_bytes(records: list[bytes]) -> bytes:
    parts = []
    for r in records:
        length = struct.pack("<Q", len(r))
        parts.append(length + struct.pack("<I", _masked_crc(length)) + r + struct.pack("<I", _masked_crc(r)))
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


def make_dataset(
    folder: str | os.PathLike[str],
    fmt: str,
    records: int,
    *,
    files: int = 1,
    compression: str | None = None,
    seed: int = 0,
) -> list[str]:
    """Write ``records`` synthetic records of format ``fmt`` into ``files`` files.

    Returns:
        The paths written, in order.

    Raises:
        ValueError: an unknown format or compression, or fewer records than files.
    """
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; choose from {', '.join(FORMATS)}")
    if records < 0 or files < 1:
        raise ValueError("records must be >= 0 and files >= 1")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    per_file = [records // files + (1 if i < records % files else 0) for i in range(files)]
    suffix = {"csv": ".csv", "tfrecord": ".tfrecord", "fixed": ".bin", "parquet": ".parquet", "lines": ".txt"}[fmt]
    if compression and fmt in ("csv", "lines", "tfrecord", "fixed"):
        suffix += ".gz" if compression.upper() == "GZIP" else ".zz"
    paths = []
    start = 0
    for i, n in enumerate(per_file):
        path = folder / f"part-{i:05d}{suffix}"
        label = np.arange(start, start + n, dtype=np.int64) % 10
        start += n
        if fmt == "csv":
            x = rng.random((n, 8), dtype=np.float32)
            body = "\n".join(
                ",".join(f"{v:.5f}" for v in row) + f",{lab}" for row, lab in zip(x.tolist(), label.tolist())
            )
            data = ("x0,x1,x2,x3,x4,x5,x6,x7,label\n" + body + ("\n" if n else "")).encode()
            path.write_bytes(_compress(data, compression))
        elif fmt == "tfrecord":
            x = rng.random((n, 32), dtype=np.float32)
            path.write_bytes(_compress(_tfrecord_bytes(encode_examples(x, label)), compression))
        elif fmt == "fixed":
            rec = np.zeros(n, dtype=[("x", "<f4", (32,)), ("label", "<i4")])
            rec["x"] = rng.random((n, 32), dtype=np.float32)
            rec["label"] = label
            path.write_bytes(_compress(rec.tobytes(), compression))
        elif fmt == "parquet":
            import pyarrow as pa
            import pyarrow.parquet as pq

            x = rng.random((n, 8), dtype=np.float32)
            cols: dict[str, Any] = {f"x{j}": x[:, j] for j in range(8)}
            cols["label"] = label
            pq.write_table(pa.table(cols), path, row_group_size=max(1, min(n, 65536)),
                           compression=(compression or "none").lower() if compression else None)
        else:
            words = ["alpha", "beta", "gamma", "delta", "epsilon"]
            lines = [f"{words[j % 5]} line {j}" for j in range(n)]
            data = ("\n".join(lines) + ("\n" if n else "")).encode()
            path.write_bytes(_compress(data, compression))
        paths.append(str(path))
    return paths


def detect_format(path: str) -> tuple[str, str | None]:
    """Guess ``(format, compression)`` from the extension, then magic bytes.

    Raises:
        ValueError: the format cannot be told; pass ``--format``.
        FileNotFoundError: the file does not exist.
    """
    p = Path(path)
    if not p.exists():
        from .errors import NotFoundError

        raise NotFoundError(f"{path}; No such file or directory")
    name = p.name.lower()
    compression = None
    if name.endswith(".gz") or name.endswith(".gzip"):
        compression, name = "GZIP", name.rsplit(".", 1)[0]
    elif name.endswith(".zz") or name.endswith(".zlib"):
        compression, name = "ZLIB", name.rsplit(".", 1)[0]
    ext = os.path.splitext(name)[1]
    if ext in _EXT:
        return _EXT[ext], compression
    with open(p, "rb") as f:
        head = f.read(16)
    if head[:4] == b"PAR1":
        return "parquet", None
    if head[:2] == b"\x1f\x8b":
        compression = "GZIP"
        with gzip.open(p, "rb") as g:
            head = g.read(16)
    if len(head) >= 12:
        length = head[:8]
        (crc,) = struct.unpack("<I", head[8:12])
        if _masked_crc(length) == crc:
            return "tfrecord", compression
    if head and all(32 <= c < 127 or c in (9, 10, 13) for c in head):
        text = head.decode("ascii", "replace")
        return ("csv" if "," in text else "lines"), compression
    raise ValueError(f"{path}: cannot tell the format; pass --format ({', '.join(FORMATS)})")
