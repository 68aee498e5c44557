"""Globs over a store, sizes, and writing an object."""

from __future__ import annotations

import fnmatch
import re
from typing import Any

from feedq.storage._filesystems import map_error, resolve, retrying
from feedq.storage._url import split

_MAGIC = re.compile(r"[*?\[]")


def glob(pattern: str) -> list[str]:
    """The URLs matching ``pattern`` (``*``, ``?``, ``[...]`` within one
    path segment, as :func:`glob.glob`), sorted.

    The listing starts at the longest prefix without a wildcard and is
    recursive only when a wildcard is in a directory segment; pyarrow's
    clients list in pages (S3: 1,000 keys per request), so a prefix with
    many objects costs one request per page, once.

    Raises:
        PermissionDeniedError, UnavailableError: the listing failed.
    """
    import pyarrow.fs as pafs

    loc = resolve(pattern)
    scheme, _, path = split(pattern)
    segments = path.split("/")
    first = next((i for i, s in enumerate(segments) if _MAGIC.search(s)), None)
    if first is None:
        info = retrying(lambda: loc.fs.get_file_info(loc.path), loc.url, "stat")
        return [pattern] if info.type == pafs.FileType.File else []
    base = "/".join(segments[:first])
    recursive = first < len(segments) - 1
    selector = pafs.FileSelector(loc.fs_prefix + base, recursive=recursive, allow_not_found=True)
    infos = retrying(lambda: loc.fs.get_file_info(selector), loc.url, "list")
    want = segments[first:]
    out = []
    for info in infos:
        if info.type != pafs.FileType.File:
            continue
        full = info.path
        if not full.startswith(loc.fs_prefix):
            continue
        rel = full[len(loc.fs_prefix) :]
        rest = rel[len(base) :].lstrip("/") if base else rel
        parts = rest.split("/")
        if len(parts) == len(want) and all(
            fnmatch.fnmatchcase(p, w) for p, w in zip(parts, want)
        ):
            out.append(f"{loc.prefix}/{rel}")
    return sorted(out)


def size_of(name: bytes | str) -> int:
    """The size in bytes of a remote object.

    Raises:
        NotFoundError: no such object.
    """
    import pyarrow.fs as pafs

    loc = resolve(name)
    info = retrying(lambda: loc.fs.get_file_info(loc.path), loc.url, "stat")
    if info.type != pafs.FileType.File:
        from feedq.errors import NotFoundError

        raise NotFoundError(f"{loc.url}; No such file or directory")
    return int(info.size)


def exists(name: bytes | str) -> bool:
    """True when a remote object exists at ``name``."""
    import pyarrow.fs as pafs

    loc = resolve(name)
    info = retrying(lambda: loc.fs.get_file_info(loc.path), loc.url, "stat")
    return bool(info.type == pafs.FileType.File)


def open_output(name: bytes | str) -> Any:
    """A writable stream to a remote object (bytes as written: never
    compressed by extension); the object appears when it is closed.

    Raises:
        NotFoundError, PermissionDeniedError, UnavailableError: as named.
    """
    loc = resolve(name)
    try:
        return _Output(loc.url, loc.fs.open_output_stream(loc.path, compression=None))
    except (OSError, ValueError) as exc:
        raise map_error(exc, loc.url, "open for writing") from None


class _Output:
    """A remote object being written: failures become feedq errors naming the URL."""

    def __init__(self, url: str, stream: Any) -> None:
        self.name = url
        self._stream = stream
        self._written = 0

    def write(self, data: bytes) -> int:
        try:
            self._stream.write(data)
        except (OSError, ValueError) as exc:
            raise map_error(exc, self.name, "write", self._written) from None
        self._written += len(data)
        return len(data)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except (OSError, ValueError) as exc:
            raise map_error(exc, self.name, "flush", self._written) from None

    def close(self) -> None:
        try:
            self._stream.close()
        except (OSError, ValueError) as exc:
            raise map_error(exc, self.name, "close (upload)", self._written) from None
