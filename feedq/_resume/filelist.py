"""A file producer's list as a state names it: a digest, not every name.

A resumable ``string_input_producer`` over 100,000 URLs would put every
URL in every state (about 40 bytes a file: 4 MB, and as many milliseconds
to build, on each ``state_dict()``). A state names the list instead by

* its length and SHA-256 (over the names joined with NUL bytes): what a
  restore must agree on;
* a *chunk table*: a CRC32 per chunk of ``chunk`` consecutive names, at
  most :data:`MAX_CHUNKS` chunks (``chunk`` the smallest power of two that
  needs no more), so that a mismatch is located: the exact file for lists
  of up to 4,096 files, within 32 files for 100,000;
* the names themselves only while they are small (:data:`INLINE_BYTES` of
  names in all): then the table is left out, a mismatch names the file and
  both names, and ``reshard_states`` can work without ``files=``.

Everything here is computed once per producer (its inputs never change),
so a state's size and ``state_dict()``'s time do not grow with the list.
"""

from __future__ import annotations

import base64
import hashlib
import zlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from feedq.errors import InvalidArgumentError

__all__: list[str] = []

# Names kept in a state while they total at most this many bytes.
INLINE_BYTES = 16 * 1024
# At most this many chunk CRCs in a state's table (4 bytes each).
MAX_CHUNKS = 4096


def to_text(value: Any) -> str:
    """A file name (bytes) as text for a state (``torch.load(weights_only=True)``
    refuses bytes); :func:`to_bytes` undoes it exactly."""
    return bytes(value).decode("utf-8", "surrogateescape")


def to_bytes(value: Any) -> Any:
    """A state's text back to the producer's bytes (other values unchanged)."""
    return value.encode("utf-8", "surrogateescape") if isinstance(value, str) else value


def chunk_size(count: int) -> int:
    """The smallest power of two that cuts ``count`` names into at most
    :data:`MAX_CHUNKS` chunks (lists of close lengths share it, so their
    tables compare chunk by chunk)."""
    c = 1
    while -(-count // c) > MAX_CHUNKS:
        c *= 2
    return c


def chunk_crcs(names: Sequence[bytes], chunk: int) -> np.ndarray[Any, Any]:
    """CRC32 of each run of ``chunk`` names (joined with NUL bytes)."""
    return np.array(
        [zlib.crc32(b"\0".join(names[k : k + chunk])) for k in range(0, len(names), chunk)],
        dtype=np.uint32,
    )


def _pack_crcs(crcs: np.ndarray[Any, Any]) -> str:
    return base64.b64encode(np.ascontiguousarray(crcs, dtype="<u4").tobytes()).decode("ascii")


def _unpack_crcs(text: Any) -> np.ndarray[Any, Any]:
    try:
        raw = base64.b64decode(str(text).encode("ascii"), validate=True)
    except ValueError as exc:
        raise InvalidArgumentError(f"not a feedq state: its file list's chunk table is corrupt ({exc})") from None
    if len(raw) % 4:
        raise InvalidArgumentError("not a feedq state: its file list's chunk table is corrupt")
    return np.frombuffer(raw, dtype="<u4").astype(np.uint32)


def check_digest(digest: Any) -> None:
    """A saved ``inputs_digest`` (None, or the dict :meth:`FileList.digest`
    makes), or InvalidArgumentError naming what is wrong with it."""
    if digest is None:
        return
    what = "not a feedq state: its file list's inputs_digest"
    if not isinstance(digest, dict):
        raise InvalidArgumentError(f"{what} is a {type(digest).__name__}, not a dict")
    for key in ("count", "sha256", "chunk", "crcs"):
        if key not in digest:
            raise InvalidArgumentError(f"{what} has no {key!r}")
    for key in ("count", "chunk"):
        value = digest[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InvalidArgumentError(f"{what}: {key} must be an int >= 0, got {value!r}")
    sha = digest["sha256"]
    if not isinstance(sha, str) or len(sha) != 64 or any(c not in "0123456789abcdef" for c in sha):
        raise InvalidArgumentError(f"{what}: sha256 must be 64 lower-case hex digits, got {sha!r}")
    if not isinstance(digest["crcs"], str):
        raise InvalidArgumentError(f"{what}: crcs must be a string, got {digest['crcs']!r}")


def list_digest(names: Sequence[Any]) -> tuple[str, int]:
    """(SHA-256 hex, CRC32) of a list of names (bytes or text)."""
    joined = b"\0".join(v if isinstance(v, bytes) else to_bytes(str(v)) for v in names)
    return hashlib.sha256(joined).hexdigest(), zlib.crc32(joined)


class FileList:
    """A producer's file names and what a state keeps of them.

    Args:
        names: the names, as the producer holds them (bytes).
    """

    def __init__(self, names: Sequence[bytes]) -> None:
        self.names = [bytes(v) for v in names]
        self.count = len(self.names)
        joined = b"\0".join(self.names)
        self.sha256 = hashlib.sha256(joined).hexdigest()
        self.crc32 = zlib.crc32(joined)
        small = len(joined) - max(0, self.count - 1) <= INLINE_BYTES
        self.inline: list[str] | None = [to_text(v) for v in self.names] if small else None
        chunk = 0 if small else chunk_size(self.count)
        self._digest = {
            "count": self.count,
            "sha256": self.sha256,
            "chunk": chunk,
            "crcs": _pack_crcs(chunk_crcs(self.names, chunk)) if chunk else "",
        }

    def digest(self) -> dict[str, Any]:
        """The state's ``inputs_digest`` (plain data, a fresh dict)."""
        return dict(self._digest)

    def inputs(self) -> list[str] | None:
        """The state's ``inputs``: the names while small, else None."""
        return None if self.inline is None else list(self.inline)

    def matches(self, inputs: Any, digest: Any) -> bool:
        """Whether a state's ``inputs`` / ``inputs_digest`` name this list."""
        return self.difference(inputs, digest) is None

    def difference(self, inputs: Any, digest: Any) -> str | None:
        """Where a state's list differs from this one (None: the same).

        ``inputs`` are the saved names (None when the state holds only a
        digest), ``digest`` the saved ``inputs_digest`` (None in states
        written before digests).
        """
        if isinstance(digest, dict):
            if digest.get("count") == self.count and digest.get("sha256") == self.sha256:
                return None
        if inputs is not None:
            return self._name_difference([str(v) for v in inputs])
        if not isinstance(digest, dict):
            return "the state names no file list"
        saved_count = int(digest["count"])
        chunk = int(digest.get("chunk") or 0)
        if chunk < 1:
            raise InvalidArgumentError("not a feedq state: its file list has neither names nor a chunk table")
        saved = _unpack_crcs(digest["crcs"])
        mine = chunk_crcs(self.names, chunk)
        common = min(saved.shape[0], mine.shape[0])
        differ = np.flatnonzero(saved[:common] != mine[:common])
        counts = f"saved {saved_count:,} files, now {self.count:,}"
        if differ.shape[0]:
            lo = int(differ[0]) * chunk
            hi = min(lo + chunk, max(saved_count, self.count))
            if hi - lo == 1:
                return f"{counts}; file {lo:,} differs (now {self._name(lo)})"
            return (
                f"{counts}; the first difference is in files {lo:,}..{hi - 1:,} "
                f"(now {self._name(lo)} .. {self._name(hi - 1)})"
            )
        if saved_count != self.count:
            return f"{counts}; the first {min(saved_count, self.count):,} are the same"
        return (
            f"{counts}; the lists differ (SHA-256 saved {str(digest.get('sha256'))[:16]}..., "
            f"now {self.sha256[:16]}...) where the state's chunk table cannot tell"
        )

    def _name(self, i: int) -> str:
        return repr(to_text(self.names[i])) if i < self.count else "(past the end)"

    def _name_difference(self, saved: list[str]) -> str | None:
        mine = self.inline if self.inline is not None else [to_text(v) for v in self.names]
        for i, (a, b) in enumerate(zip(saved, mine)):
            if a != b:
                return f"file {i:,} differs: saved {a!r}, now {b!r}"
        if len(saved) == len(mine):
            return None
        return (
            f"saved {len(saved):,} files, now {len(mine):,}; the first "
            f"{min(len(saved), len(mine)):,} are the same"
        )
