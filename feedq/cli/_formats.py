"""The file formats feedq's commands read, and telling which one a file is
(``feedq bench`` / ``feedq inspect`` without ``--format``): by the name's
extension, then by the first bytes."""

from __future__ import annotations

import gzip
import os
import stat
import struct
import zlib
from pathlib import Path

from feedq import storage
from feedq._core.extras import zstd_module
from feedq.readers import masked_crc32c

__all__ = ["FORMATS", "detect_format", "is_stream"]

#: What ``--format`` accepts (and ``feedq make-data`` writes).
FORMATS = ("csv", "tfrecord", "fixed", "parquet", "lines")
_EXT = {
    ".csv": "csv", ".tsv": "csv",
    ".tfrecord": "tfrecord", ".tfrecords": "tfrecord", ".tfr": "tfrecord",
    ".bin": "fixed", ".fixed": "fixed", ".rec": "fixed",
    ".parquet": "parquet", ".pq": "parquet",
    ".txt": "lines", ".lines": "lines", ".log": "lines",
}


def is_stream(path: str) -> bool:
    """Whether ``path`` is a named pipe, a character device or a socket: data
    that can be read only once (``mkfifo``, ``<(cmd)``, ``/dev/stdin``).
    Regular files, ``/proc`` files included, can be read again."""
    if storage.is_remote(path):
        return False
    try:
        mode = os.stat(storage.local_path(path)).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISCHR(mode) or stat.S_ISSOCK(mode)


def detect_format(path: str) -> tuple[str, str | None]:
    """Guess ``(format, compression)`` from the extension, then magic bytes.

    A pipe or device (:func:`is_stream`) is told by its name only: reading
    its first bytes would take them from the reader that comes after.

    Raises:
        ValueError: the format cannot be told; pass ``--format``.
        FileNotFoundError: the file does not exist.
    """
    remote = storage.is_remote(path)
    p = Path(path if remote else storage.local_path(path))
    if remote:
        if not storage.exists(path):
            from feedq.errors import NotFoundError

            raise NotFoundError(f"{path}; No such file or directory")
    elif not p.exists():
        from feedq.errors import NotFoundError

        raise NotFoundError(f"{path}; No such file or directory")
    name = p.name.lower()
    compression = None
    if name.endswith((".gz", ".gzip")):
        compression, name = "GZIP", name.rsplit(".", 1)[0]
    elif name.endswith((".zz", ".zlib")):
        compression, name = "ZLIB", name.rsplit(".", 1)[0]
    elif name.endswith((".zst", ".zstd")):
        compression, name = "ZSTD", name.rsplit(".", 1)[0]
    ext = os.path.splitext(name)[1]
    if ext in _EXT:
        return _EXT[ext], compression
    if remote:
        return _detect_remote(path)
    if is_stream(path):
        raise ValueError(f"{path} is a pipe or device: it can be read only once, so feedq does not "
                         f"read its first bytes to tell the format; pass --format "
                         f"({', '.join(FORMATS)}) and --compression")
    with open(p, "rb") as f:
        head = f.read(16)
    if head[:4] == b"PAR1":
        return "parquet", None
    if head[:2] == b"\x1f\x8b":
        compression = "GZIP"
        with gzip.open(p, "rb") as g:
            head = g.read(16)
    elif head[:4] == b"\x28\xb5\x2f\xfd":
        compression = "ZSTD"
        with open(p, "rb") as f, zstd_module().ZstdDecompressor().stream_reader(f) as z:
            head = z.read(16)
    return _detect_head(path, head, compression)


def _detect_remote(url: str) -> tuple[str, str | None]:
    """Magic bytes of an object in a store: its first 64 KiB, one range request."""
    f = storage.open_remote(url)
    try:
        first = f.read(1 << 16)
    finally:
        f.close()
    head, compression = first[:16], None
    if head[:4] == b"PAR1":
        return "parquet", None
    if head[:2] == b"\x1f\x8b":
        compression, head = "GZIP", zlib.decompressobj(31).decompress(first, 16)
    elif head[:4] == b"\x28\xb5\x2f\xfd":
        compression = "ZSTD"
        head = zstd_module().ZstdDecompressor().decompressobj().decompress(first)[:16]
    return _detect_head(url, head, compression)


def _detect_head(path: str, head: bytes, compression: str | None) -> tuple[str, str | None]:
    if len(head) >= 12:
        length = head[:8]
        (crc,) = struct.unpack("<I", head[8:12])
        if masked_crc32c(length) == crc:
            return "tfrecord", compression
    if head and all(32 <= c < 127 or c in (9, 10, 13) for c in head):
        text = head.decode("ascii", "replace")
        return ("csv" if "," in text else "lines"), compression
    raise ValueError(f"{path}: cannot tell the format; pass --format ({', '.join(FORMATS)})")
