"""TarReader: WebDataset-style tar shards, one record per sample (members grouped by key).

A shard is a plain POSIX tar (ustar, GNU long names and pax ``path``
records understood) whose consecutive members that share a key make one
sample: ``n01440764/0001.jpg`` and ``n01440764/0001.cls`` are the fields
``jpg`` and ``cls`` of sample ``n01440764/0001`` (the key is the path up to
the first dot of the file name, the field what follows, lowercased, as in
WebDataset). The shard is streamed through the reader's bounded buffer;
members are never extracted.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from feedq.errors import DataLossError
from feedq.readers._base import DEFAULT_BLOCK_BYTES, OnError, ReaderBase
from feedq.readers._block import RecordBlock
from feedq.readers._buffer import _Buffer, _open_stream_at
from feedq.readers._io import normalize_compression
from feedq.readers._skip import _data_loss, _SkipFile

__all__ = ["TarBlock", "TarReader"]

_BLOCK = 512
_REGULAR = (b"0", b"\0", b"7")


@dataclass(frozen=True, eq=False)
class TarBlock:
    """Up to ``n`` consecutive samples of one shard, their members left in the read buffer.

    ``block["jpg"]`` is a :class:`RecordBlock` of the ``jpg`` members (one
    per sample, in order, no copy), which the image decoders take as it is.

    Attributes:
        work_unit: the shard's filename (bytes).
        data: the read buffer.
        names: the sample keys (bytes), ``[k]`` object array.
        fields: field name -> ``(starts, ends)`` int64 ``[k]`` offsets in ``data``.
        key_ids: int64 ``[k]``: each sample's number in the shard (0-based).
        offsets: int64 ``[k]``: the byte offset of each sample's first header.
    """

    work_unit: bytes
    data: bytes
    names: np.ndarray
    fields: dict[str, tuple[np.ndarray, np.ndarray]]
    key_ids: np.ndarray
    offsets: np.ndarray
    _cache: dict[str, Any] = field(default_factory=dict, repr=False)

    def __len__(self) -> int:
        return int(self.key_ids.shape[0])

    def __getitem__(self, name: str) -> RecordBlock:
        """The members of field ``name`` as a :class:`RecordBlock` (keys ``shard:<sample number>``)."""
        try:
            starts, ends = self.fields[name]
        except KeyError:
            raise KeyError(f"no field {name!r}; fields: {sorted(self.fields)}") from None
        return RecordBlock(self.work_unit, self.data, starts, ends, self.key_ids)

    def keys(self) -> np.ndarray:
        """``[k]`` object array of ``b"shard.tar:<sample key>"``."""
        prefix = self.work_unit + b":"
        out = np.empty(len(self), dtype=object)
        out[:] = [prefix + k for k in self.names.tolist()]
        return out

    def values(self) -> np.ndarray:
        """``[k]`` object array of dicts ``{field: bytes}``, one per sample."""
        cached = self._cache.get("values")
        if cached is None:
            d = self.data
            cols = {
                name: [d[s:e] for s, e in zip(st.tolist(), en.tolist())]
                for name, (st, en) in self.fields.items()
            }
            cached = np.empty(len(self), dtype=object)
            cached[:] = [{name: cols[name][i] for name in cols} for i in range(len(self))]
            self._cache["values"] = cached
        return cached

    def subset(self, mask: np.ndarray) -> TarBlock:
        """The samples where ``mask`` is True."""
        return TarBlock(
            self.work_unit,
            self.data,
            self.names[mask],
            {k: (s[mask], e[mask]) for k, (s, e) in self.fields.items()},
            self.key_ids[mask],
            self.offsets[mask],
        )

    @staticmethod
    def concatenate(blocks: list[TarBlock]) -> TarBlock:
        """Join blocks of one shard (copies the members into one buffer)."""
        if len(blocks) == 1:
            return blocks[0]
        names = list(blocks[0].fields)
        parts: list[bytes] = []
        pos = 0
        cols: dict[str, tuple[list[int], list[int]]] = {n: ([], []) for n in names}
        for b in blocks:
            vals = {n: b[n].values() for n in names}
            for i in range(len(b)):
                for n in names:
                    v = vals[n][i]
                    cols[n][0].append(pos)
                    parts.append(v)
                    pos += len(v)
                    cols[n][1].append(pos)
        return TarBlock(
            blocks[0].work_unit,
            b"".join(parts),
            np.concatenate([b.names for b in blocks]),
            {n: (np.asarray(s, dtype=np.int64), np.asarray(e, dtype=np.int64))
             for n, (s, e) in cols.items()},
            np.concatenate([b.key_ids for b in blocks]),
            np.concatenate([b.offsets for b in blocks]),
        )


def _octal(raw: bytes) -> int:
    if raw[:1] and raw[0] & 0x80:  # GNU base-256 (sizes over 8 GiB)
        return int.from_bytes(raw[1:], "big")
    text = raw.replace(b"\0", b" ").strip()
    return int(text, 8) if text else 0


def _split(path: str) -> tuple[str, str]:
    """WebDataset's (key, field): the path up to the first dot of its file name."""
    head, base = os.path.split(path)
    dot = base.find(".")
    if dot < 0:
        return path, ""
    return os.path.join(head, base[:dot]) if head else base[:dot], base[dot + 1 :].lower()


class _BadSample(Exception):
    """Internal: a malformed sample; ``next_offset`` is where the next one starts."""

    def __init__(self, message: str, offset: int, next_offset: int | None) -> None:
        super().__init__(message)
        self.offset = offset
        self.next_offset = next_offset


class TarReader(ReaderBase):
    """Reads WebDataset-style tar shards: one record per sample (beyond TF1).

    Give the shards to a filename queue (``string_input_producer(shards,
    shuffle=True)``: sharding and shuffling are by file); ``read_block``
    returns :class:`TarBlock` s of up to ``n`` samples, whose ``block["jpg"]``
    feed the image decoders. ``read()`` gives ``(b"shard.tar:<key>", {field:
    bytes})``.

    Every sample must have the same fields: ``fields`` names them (other
    members are ignored), or by default those of the shard's first sample.
    A sample that lacks one (or has one twice) is a ``DataLossError``
    naming the shard, the sample and its offset; with ``on_error="skip"``
    that sample alone is skipped and counted. A bad header checksum or a
    truncated member is a ``DataLossError`` naming the offset; the rest of
    that shard is skipped.

    State: the offset of the next sample's first header and its number, so
    a restored reader goes on at the next sample (``state_dict``).

    Args:
        fields: the fields of every sample, e.g. ``("jpg", "cls")``.
        compression: ``""``, ``"GZIP"`` (``.tar.gz``), ``"ZLIB"`` or ``"ZSTD"``.
        on_error: ``"raise"`` or ``"skip"`` (see :class:`ReaderBase`).
        block_bytes: bytes buffered per block (a sample larger than this is
            read whole).
        name: a name for logs.
    """

    def __init__(
        self,
        fields: Sequence[str] | None = None,
        compression: str | None = None,
        *,
        on_error: OnError = "raise",
        block_bytes: int = DEFAULT_BLOCK_BYTES,
        name: str | None = None,
    ) -> None:
        super().__init__(on_error=on_error, block_bytes=block_bytes, name=name)
        self.fields = None if fields is None else tuple(f.lower() for f in fields)
        if self.fields is not None and (not self.fields or len(set(self.fields)) != len(self.fields)):
            raise ValueError(f"fields must be distinct names, got {fields!r}")
        self.compression = normalize_compression(compression)
        self._buf: _Buffer | None = None
        self._next = 0  # number of the next sample in the shard
        self._end = False  # the end-of-archive marker (or the clean end) was reached
        self._shard_fields: tuple[str, ...] | None = None
        self._resume_index = 0  # the sample number after a skipped one

    # ------------------------------------------------------------ opening
    def _open(self, work_unit: bytes) -> None:
        self._open_at(work_unit, 0, 0)
        self._shard_fields = self.fields

    def _open_at(self, work_unit: bytes, offset: int, index: int) -> None:
        self._stream = _open_stream_at(work_unit, self.compression, offset, self._waiter)
        self._buf = _Buffer(self._stream, self.block_bytes)
        self._next = index
        self._end = False

    def _fname(self) -> str:
        return (self._work_unit or b"").decode("utf-8", "backslashreplace")

    # ------------------------------------------------------------ parsing
    def _need(self, rel: int, at: int) -> bool:
        """``rel`` bytes from the buffer position; False at the stream's end."""
        buf = self._buf
        assert buf is not None
        if buf.fill(rel):
            return True
        if buf.error is not None:
            raise _BadSample(str(buf.error.message), at, None)
        return False

    def _member(self, rel: int) -> tuple[str, int, int, int] | None:
        """The member whose header is at ``rel``: (path, data rel, size, next rel).

        None at the end of the archive. Long names (GNU ``L``, pax ``path``)
        are folded into the member they name; directories and links are
        skipped.
        """
        buf = self._buf
        assert buf is not None
        long_name: str | None = None
        while True:
            at = buf.base + buf.pos + rel
            if not self._need(rel + _BLOCK, at):
                if buf.avail - rel == 0 and long_name is None:
                    return None  # a clean end without the zero blocks
                raise _BadSample(f"{self._fname()}: truncated tar header at offset {at}", at, None)
            d = buf.data
            h = d[buf.pos + rel : buf.pos + rel + _BLOCK]
            if h == bytes(_BLOCK):
                return None  # the end-of-archive marker
            try:
                stored = _octal(h[148:156])
            except ValueError:
                stored = -1
            check = sum(h[:148]) + 8 * 32 + sum(h[156:])
            if stored != check:
                raise _BadSample(
                    f"{self._fname()}: bad tar header checksum at offset {at} "
                    "(is this a tar file?)",
                    at,
                    None,
                )
            try:
                size = _octal(h[124:136])
            except ValueError:
                raise _BadSample(f"{self._fname()}: bad member size at offset {at}", at, None) from None
            kind = h[156:157]
            data_rel = rel + _BLOCK
            next_rel = data_rel + -(-size // _BLOCK) * _BLOCK
            size_known = buf.stream.size
            if size_known is not None and buf.base + buf.pos + data_rel + size > size_known:
                raise _BadSample(
                    f"{self._fname()}: truncated tar member at offset {at} ({size} bytes)", at, None
                )
            if kind in (b"L", b"x"):
                if not self._need(data_rel + size, at):
                    raise _BadSample(f"{self._fname()}: truncated tar member at offset {at}", at, None)
                d = buf.data
                body = d[buf.pos + data_rel : buf.pos + data_rel + size]
                if kind == b"L":
                    long_name = body.rstrip(b"\0").decode("utf-8", "surrogateescape")
                else:
                    long_name = _pax_path(body) or long_name
                rel = next_rel
                continue
            if kind not in _REGULAR:
                rel = next_rel  # directories, links, global pax headers
                long_name = None
                continue
            if long_name is not None:
                path = long_name
            else:
                name = h[0:100].split(b"\0", 1)[0]
                if h[257:262] == b"ustar":
                    prefix = h[345:500].split(b"\0", 1)[0]
                    if prefix:
                        name = prefix + b"/" + name
                path = name.decode("utf-8", "surrogateescape")
            return path, data_rel, size, next_rel

    def _next_block(self, n: int) -> TarBlock:
        buf, wu = self._buf, self._work_unit
        assert buf is not None and wu is not None
        names: list[bytes] = []
        cols: dict[str, tuple[list[int], list[int]]] = {}
        offsets: list[int] = []
        rel = 0  # the next sample's first header, from buf.pos
        err: _SkipFile | None = None
        while len(names) < n and not self._end:
            if names and rel >= self.block_bytes:
                break  # a block's worth: the next sample in the next block
            try:
                sample = self._sample(rel)
            except _BadSample as exc:
                resume = exc.next_offset
                err = _data_loss(DataLossError(str(exc)), exc.offset, resume)
                if resume is not None:
                    self._resume_index = self._next + len(names) + 1
                break
            if sample is None:
                self._end = True
                break
            key, members, next_rel = sample
            if self._shard_fields is None:
                self._shard_fields = tuple(members)
            offsets.append(buf.base + buf.pos + rel)
            names.append(key.encode("utf-8", "surrogateescape"))
            for f in self._shard_fields:
                s, size = members[f]  # from buf.pos, which a refill moves: fixed below
                col = cols.setdefault(f, ([], []))
                col[0].append(s)
                col[1].append(s + size)
            rel = next_rel
        if err is not None:
            if not names:
                raise err
            self._pending = err
        k = len(names)
        block = TarBlock(
            wu,
            buf.data,
            _objects(names),
            {f: (np.asarray(s, dtype=np.int64) + buf.pos, np.asarray(e, dtype=np.int64) + buf.pos)
             for f, (s, e) in cols.items()},
            np.arange(self._next, self._next + k, dtype=np.int64),
            np.asarray(offsets, dtype=np.int64),
        )
        if k == 0 and self._shard_fields is not None:
            block = TarBlock(
                wu, b"", _objects([]),
                {f: (np.zeros(0, np.int64), np.zeros(0, np.int64)) for f in self._shard_fields},
                np.zeros(0, np.int64), np.zeros(0, np.int64),
            )
        buf.pos += rel
        self._next += k
        return block

    def _sample(self, rel: int) -> tuple[str, dict[str, tuple[int, int]], int] | None:
        """The sample starting at ``rel``: (key, field -> (data rel, size), next rel)."""
        buf = self._buf
        assert buf is not None
        first = self._member(rel)
        if first is None:
            return None
        key, _ = _split(first[0])
        members: dict[str, tuple[int, int]] = {}
        dup: str | None = None
        member: tuple[str, int, int, int] | None = first
        start = buf.base + buf.pos + rel
        while member is not None:
            path, data_rel, size, next_rel = member
            mkey, fname = _split(path)
            if mkey != key:
                break
            if not self._need(data_rel + size, start):
                at = buf.base + buf.pos + data_rel - _BLOCK
                raise _BadSample(f"{self._fname()}: truncated tar member at offset {at}", at, None)
            if fname in members:
                dup = fname
            if self.fields is None or fname in self.fields:
                members[fname] = (data_rel, size)
            rel = next_rel
            try:
                member = self._member(rel)
            except _BadSample:
                break  # the next sample's header is bad: this one is whole, the error comes next
        expected = self._shard_fields
        if dup is not None or (expected is not None and set(members) != set(expected)):
            if dup is not None:
                why = f"has two {dup!r} members"
            else:
                assert expected is not None
                missing = sorted(set(expected) - set(members))
                extra = sorted(set(members) - set(expected))
                why = (f"lacks field(s) {missing}" if missing else "") + (
                    f"{' and ' if missing else ''}has unexpected field(s) {extra}" if extra else ""
                )
            raise _BadSample(
                f"{self._fname()}: sample {key!r} at offset {start} {why}",
                start,
                buf.base + buf.pos + rel,
            )
        return key, members, rel

    # -------------------------------------------------------------- state
    def _exhausted(self) -> bool:
        return self._buf is None or (self._end and self._pending is None)

    def _position(self) -> tuple[int, int]:
        buf = self._buf
        assert buf is not None
        return buf.offset, self._next

    def _seek(self, offset: int, index: int) -> None:
        assert self._work_unit is not None
        buf = self._buf
        if self._stream is not None and buf is not None and buf.base == offset == buf.offset:
            self._next = index
            return
        self._close_stream()
        self._open_at(self._work_unit, offset, index)

    def _resync(self, offset: int) -> None:
        # Skip the bad sample: go on at the next one.
        buf = self._buf
        assert buf is not None
        index = self._resume_index
        if buf.base <= offset <= buf.base + len(buf.data):
            buf.pos = offset - buf.base
            self._next = index
        else:
            self._seek(offset, index)


def _pax_path(body: bytes) -> str | None:
    # pax records: "<len> <key>=<value>\n"
    pos = 0
    path = None
    while pos < len(body):
        sp = body.find(b" ", pos)
        if sp < 0:
            break
        try:
            length = int(body[pos:sp])
        except ValueError:
            break
        if length <= 0:
            break
        rec = body[sp + 1 : pos + length - 1]
        k, _, v = rec.partition(b"=")
        if k == b"path":
            path = v.decode("utf-8", "surrogateescape")
        pos += length
    return path


def _objects(items: list[bytes]) -> np.ndarray:
    out = np.empty(len(items), dtype=object)
    out[:] = items
    return out
