"""The API of ``feedq._native`` over one backend: ``_core`` (C) or ``_pure`` (its twin).

Both backends expose the same low-level functions (buffers in, preallocated
NumPy arrays written, plain tuples out). This layer validates arguments,
allocates the outputs and wraps the results, once for both, so the two cores
can only differ inside the loops themselves -- which the differential tests
compare exactly.

Imports nothing from feedq (NumPy only).
"""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType
from typing import Any, NamedTuple

import numpy as np

__all__ = [
    "EX_BAD_GROUP",
    "EX_BAD_LENGTH",
    "EX_BAD_PACKED",
    "EX_BAD_TAG",
    "EX_BAD_UTF8",
    "EX_BAD_VARINT",
    "EX_BAD_WIRE_TYPE",
    "EX_OK",
    "EX_REASONS",
    "EX_TOO_DEEP",
    "EX_TRUNCATED",
    "KIND_BYTES",
    "KIND_FLOAT",
    "KIND_INT64",
    "SCAN_BAD_DATA_CRC",
    "SCAN_BAD_LENGTH_CRC",
    "SCAN_INCOMPLETE",
    "SCAN_LENGTH_TOO_LARGE",
    "SCAN_OK",
    "FeatureRequest",
    "Kernels",
    "ParsedExamples",
    "TFRecordScan",
]

# scan_tfrecords statuses
SCAN_OK = 0  #: stopped at max_records or at the end of the buffer
SCAN_INCOMPLETE = 1  #: the bytes from ``stop`` are not a whole record (need more; not an error)
SCAN_BAD_LENGTH_CRC = 2  #: the header at ``stop`` fails its length CRC
SCAN_LENGTH_TOO_LARGE = 3  #: the header at ``stop`` has a length above max_record_bytes
SCAN_BAD_DATA_CRC = 4  #: the record at ``stop`` is whole but fails its data CRC

# parse_examples reason codes (a record protobuf would reject)
EX_OK = 0
EX_TRUNCATED = 1
EX_BAD_VARINT = 2
EX_BAD_TAG = 3
EX_BAD_WIRE_TYPE = 4
EX_BAD_LENGTH = 5
EX_BAD_PACKED = 6
EX_BAD_UTF8 = 7
EX_BAD_GROUP = 8
EX_TOO_DEEP = 9
_EX_RECORD_RANGE = -1  # backend-internal: a record outside the buffer

#: Words for each reason code (for logs; the public error stays TF's message).
EX_REASONS = {
    EX_OK: "ok",
    EX_TRUNCATED: "a varint, fixed-size value or tag runs past the end of its message",
    EX_BAD_VARINT: "a varint longer than 10 bytes (a length or tag: 5)",
    EX_BAD_TAG: "a tag above 2**32 or longer than 5 bytes, or field number 0",
    EX_BAD_WIRE_TYPE: "wire type 6 or 7",
    EX_BAD_LENGTH: "a length-delimited field longer than the rest of its message",
    EX_BAD_PACKED: "packed floats not a multiple of 4 bytes, or a packed varint cut short",
    EX_BAD_UTF8: "a feature name that is not UTF-8",
    EX_BAD_GROUP: "an end-group tag without its start, or a group left open",
    EX_TOO_DEEP: "groups nested deeper than protobuf allows",
}

# Feature kinds: the field numbers of Feature's oneof (bytes_list, float_list, int64_list)
KIND_BYTES = 1
KIND_FLOAT = 2
KIND_INT64 = 3
_KIND_DTYPE: dict[int, np.dtype[Any]] = {KIND_FLOAT: np.dtype(np.float32), KIND_INT64: np.dtype(np.int64)}

#: Largest TFRecord length accepted by default (as TFRecordReader's default).
DEFAULT_MAX_RECORD_BYTES = 1 << 30


class TFRecordScan(NamedTuple):
    """What :func:`scan_tfrecords` found.

    Attributes:
        starts: int64 ``[k]`` offsets of the records' 12-byte headers in the buffer.
        lengths: int64 ``[k]`` data lengths (record ``i``'s data is
            ``buf[starts[i] + 12 : starts[i] + 12 + lengths[i]]``).
        stop: offset of the first byte not consumed: after the last record
            returned, which is the bad record's offset when ``status`` is an error.
        status: one of the ``SCAN_*`` codes.
    """

    starts: np.ndarray
    lengths: np.ndarray
    stop: int
    status: int


class FeatureRequest(NamedTuple):
    """One feature to parse.

    Attributes:
        name: the feature's key (bytes; a str is UTF-8 encoded).
        kind: ``KIND_BYTES``, ``KIND_FLOAT`` or ``KIND_INT64``.
        fixed: values per record, written into a ``[B, fixed]`` column
            (float/int64 only); -1 (default) for flat values + row splits.
            Ignored (always flat) for bytes features.
    """

    name: bytes
    kind: int
    fixed: int = -1


class ParsedExamples(NamedTuple):
    """What :func:`parse_examples` found, per requested feature ``f`` and record ``i``.

    Attributes:
        kinds: int8 ``[F, B]``: the kind of the Feature found (``KIND_*``), 0 when
            the record has no such feature (or a Feature with no kind).
        counts: int64 ``[F, B]``: how many values it holds, whatever its kind.
        values: per feature: a fixed float/int64 feature's ``[B, fixed]`` column,
            whose row ``i`` is written when ``kinds[f, i]`` is the requested kind
            and ``counts[f, i] == fixed`` (other rows are left as they were:
            zeros, or the ``out`` array's contents); else the flat values of
            the records of the requested kind, in record order: float32 or
            int64 ``[N]``, or for bytes int64 ``[N, 2]`` (start, end) offsets
            into the buffer.
        splits: per feature: int64 ``[B + 1]`` row splits of the flat values
            (records of another kind count 0), or None for a column.
        error_index: the first record that is not a valid serialized Example,
            or -1. Parsing stopped there: it and the records after it are
            reported as having no features.
        error_code: why (an ``EX_*`` code; ``EX_OK`` when ``error_index`` is -1).
    """

    kinds: np.ndarray
    counts: np.ndarray
    values: list[np.ndarray]
    splits: list[np.ndarray | None]
    error_index: int
    error_code: int


def _byte_view(buf: Any) -> memoryview:
    mv = memoryview(buf)
    if not mv.c_contiguous:
        raise ValueError("buffer must be C-contiguous")
    if mv.format != "B" or mv.ndim != 1:
        mv = mv.cast("B")
    return mv


def _uint64_vector(x: Any) -> np.ndarray:
    arr = np.ascontiguousarray(x, dtype=np.uint64)
    if arr.ndim != 1:
        raise ValueError(f"raw draws must be one-dimensional, got shape {arr.shape}")
    return arr


def _int64_vector(x: Any, what: str) -> np.ndarray:
    arr = np.ascontiguousarray(x, dtype=np.int64)
    if arr.ndim != 1:
        raise ValueError(f"{what} must be one-dimensional, got shape {arr.shape}")
    return arr


class Kernels:
    """The kernels of one backend (see ``feedq._native`` for the contract of each).

    Args:
        backend: ``feedq._native._core`` or ``feedq._native._pure``.
        name: ``"native"`` or ``"python"``.
        fallback: the backend for functions ``backend`` was built without
            (the twin; default: ``backend`` itself).
    """

    def __init__(self, backend: ModuleType, name: str, fallback: ModuleType | None = None) -> None:
        self.backend = backend
        self.name = name
        self.fallback = fallback if fallback is not None else backend

    def __repr__(self) -> str:
        return f"<feedq._native kernels: {self.name}>"

    # -------------------------------------------------------------- CRC32C
    def crc32c(self, data: Any, value: int = 0) -> int:
        """CRC32C (Castagnoli) of ``data``, extending ``value`` (a previous CRC).

        ``crc32c(b, crc32c(a)) == crc32c(a + b)``; same results as the
        ``crc32c`` package.

        Raises:
            ValueError: ``value`` outside ``[0, 2**32)``.
        """
        return int(self.backend.crc32c(_byte_view(data), value))

    def masked_crc32c(self, data: Any) -> int:
        """TFRecord's masked CRC32C of ``data``: ``rot32(crc, 15) + 0xA282EAD8``."""
        return int(self.backend.masked_crc32c(_byte_view(data)))

    # ------------------------------------------------------------ TFRecord
    def scan_tfrecords(
        self,
        buf: Any,
        start: int = 0,
        max_records: int | None = None,
        *,
        max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
        check_data_crc: bool = True,
    ) -> TFRecordScan:
        """Find the complete TFRecord records of ``buf`` from ``start``.

        Record framing (little endian): ``uint64 length | uint32
        masked_crc32c(length) | data[length] | uint32 masked_crc32c(data)``.
        Records are taken in order until ``max_records``, the end of the
        buffer, bytes that are not a whole record (``SCAN_INCOMPLETE``: read
        more and scan again from ``stop``), or the first bad record (its
        offset is ``stop``): a length CRC mismatch, a length above
        ``max_record_bytes`` (both checked before the length is used), or a
        data CRC mismatch (skipped with ``check_data_crc=False``). No length,
        however large, reads outside ``buf`` or sizes an allocation: the
        outputs are bounded by ``len(buf) // 16``.

        Returns:
            :class:`TFRecordScan`.

        Raises:
            ValueError: ``start`` outside ``[0, len(buf)]``, a negative
                ``max_records`` or ``max_record_bytes``.
        """
        mv = _byte_view(buf)
        start = int(start)
        if not 0 <= start <= len(mv):
            raise ValueError(f"start {start} is outside the buffer of {len(mv)} bytes")
        if max_records is not None and int(max_records) < 0:
            raise ValueError(f"max_records must be >= 0, got {max_records}")
        if int(max_record_bytes) < 0:
            raise ValueError(f"max_record_bytes must be >= 0, got {max_record_bytes}")
        # A record takes at least 16 bytes; one slot more lets the scan look
        # at (and judge) a trailing header.
        cap = (len(mv) - start) // 16 + 1
        if max_records is not None:
            cap = min(cap, int(max_records))
        starts = np.empty(cap, dtype=np.int64)
        lengths = np.empty(cap, dtype=np.int64)
        count, stop, status = self.backend.scan_tfrecords(
            mv, start, cap, min(int(max_record_bytes), (1 << 64) - 1), bool(check_data_crc),
            starts, lengths,
        )
        if count != cap:
            starts, lengths = starts[:count].copy(), lengths[:count].copy()
        return TFRecordScan(starts, lengths, int(stop), int(status))

    # ------------------------------------------------------------- Example
    def parse_examples(
        self,
        buf: Any,
        starts: Any,
        lengths: Any,
        features: Sequence[FeatureRequest | tuple[Any, ...]],
        *,
        out: Sequence[np.ndarray | None] | None = None,
    ) -> ParsedExamples:
        """Parse serialized ``tf.train.Example`` records into columns.

        Record ``i`` is ``buf[starts[i] : starts[i] + lengths[i]]``. Each
        record is validated whole, as protobuf (upb) parses an Example:
        unrequested features and unknown fields too (their wire structure,
        feature names as UTF-8, group nesting), and the first record protobuf
        would reject stops the parse (``error_index``, ``error_code``).
        Values follow protobuf's merge rules: a repeated feature name -- the
        last entry wins (an entry with unknown fields is ignored, as upb
        does); repeated ``value`` fields and list fields are merged, a list of
        another kind replacing the one before (oneof); packed and unpacked
        encodings both count.

        Args:
            buf: the buffer holding the records.
            starts, lengths: int64 ``[B]``.
            features: :class:`FeatureRequest` (or ``(name, kind, fixed)``
                tuples), distinct names.
            out: optional per-feature arrays to use as the ``[B, fixed]``
                columns of fixed float/int64 features (C-contiguous, of the
                feature's dtype, ``B * fixed`` items; e.g. prefilled with the
                default value); None entries are allocated (zeros).

        Returns:
            :class:`ParsedExamples`.

        Raises:
            ValueError: a record outside the buffer, a bad request, an ``out``
                array of the wrong dtype or size.
        """
        u8 = np.frombuffer(_byte_view(buf), dtype=np.uint8)
        st = _int64_vector(starts, "starts")
        ln = _int64_vector(lengths, "lengths")
        if st.shape != ln.shape:
            raise ValueError(f"starts and lengths differ in shape: {st.shape} vs {ln.shape}")
        B = len(st)
        bad = np.flatnonzero((st < 0) | (ln < 0) | (st > len(u8) - ln))
        if bad.size:
            i = int(bad[0])
            raise ValueError(
                f"record {i} (start {int(st[i])}, length {int(ln[i])}) is outside "
                f"the buffer of {len(u8)} bytes"
            )
        reqs = [_request(f) for f in features]
        if len({r.name for r in reqs}) != len(reqs):
            raise ValueError("feature names must be distinct")
        if out is not None and len(out) != len(reqs):
            raise ValueError(f"out has {len(out)} entries for {len(reqs)} features")
        F = len(reqs)
        cols: list[np.ndarray | None] = []
        for fi, r in enumerate(reqs):
            if r.fixed < 0:
                cols.append(None)
                continue
            dt = _KIND_DTYPE[r.kind]
            given = out[fi] if out is not None else None
            if given is None:
                cols.append(np.zeros((B, r.fixed), dtype=dt))
                continue
            if not isinstance(given, np.ndarray) or given.dtype != dt:
                raise ValueError(f"out[{fi}] must be a {dt} array")
            if given.size != B * r.fixed or not given.flags.c_contiguous or not given.flags.writeable:
                raise ValueError(
                    f"out[{fi}] must be a writable C-contiguous array of {B * r.fixed} items"
                )
            cols.append(given)
        kinds = np.zeros((F, B), dtype=np.int8)
        counts = np.zeros((F, B), dtype=np.int64)
        err_index, err_code, flats = self.backend.parse_examples(
            u8, st, ln,
            tuple(r.name for r in reqs),
            bytes(r.kind for r in reqs),
            tuple(r.fixed for r in reqs),
            tuple(cols),
            kinds, counts,
        )
        if err_code == _EX_RECORD_RANGE:  # pragma: no cover - validated above
            raise ValueError(f"record {err_index} is outside the buffer")
        values: list[np.ndarray] = []
        splits: list[np.ndarray | None] = []
        for fi, r in enumerate(reqs):
            col = cols[fi]
            if col is not None:
                values.append(col)
                splits.append(None)
                continue
            flat = flats[fi]
            if r.kind == KIND_BYTES:
                values.append(np.frombuffer(flat, dtype=np.int64).reshape(-1, 2))
            else:
                values.append(np.frombuffer(flat, dtype=_KIND_DTYPE[r.kind]))
            per = np.where(kinds[fi] == r.kind, counts[fi], 0)
            sp = np.zeros(B + 1, dtype=np.int64)
            np.cumsum(per, out=sp[1:])
            splits.append(sp)
        return ParsedExamples(kinds, counts, values, splits, int(err_index), int(err_code))

    # ---------------------------------------------------------- bytes values
    def take_bytes(self, buf: Any, offsets: Any) -> np.ndarray:
        """The bytes objects ``buf[start:end]`` of each ``(start, end)`` row of
        ``offsets`` (e.g. a bytes feature's values from :meth:`parse_examples`),
        as an ``[N]`` object array.

        Raises:
            ValueError: ``offsets`` is not ``[N, 2]``, or a pair is not within
                ``buf`` with ``start <= end``.
        """
        mv = _byte_view(buf)
        off = np.ascontiguousarray(offsets, dtype=np.int64)
        if off.ndim != 2 or off.shape[1] != 2:
            raise ValueError(f"offsets must be [N, 2] (start, end) pairs, got shape {off.shape}")
        return _object_array(self.backend.take_bytes(mv, off))

    # ------------------------------------------------------------- shuffle
    def shuffle_take(self, n: int, raw: Any, cols: Sequence[Any], outs: Sequence[Any], done: Any = None) -> None:
        """The draws of a RandomShuffleQueue take: a partial Fisher-Yates
        against the tail, on the rows of byte columns, in place.

        Draw ``j`` (of ``k = len(raw)``) picks slot ``r_j = raw[j] * (n - j) >> 64``
        (uniform in ``[0, n - j)``) of the ``n - j`` rows still stored,
        copies it to row ``j`` of every ``outs[i]`` and moves row ``n-1-j``
        into the slot; rows ``[0, n - k)`` of every column are then the rows
        kept. One call for all columns: nothing can interrupt it between two.

        Args:
            n: rows stored in each column.
            raw: ``k`` uint64 draws (``Generator.bit_generator.random_raw(k)``).
            cols: writable C-contiguous buffers (fixed-size dtypes, not
                object) of at least ``n`` rows each.
            outs: one writable C-contiguous buffer of ``k`` rows per column
                (its row size is ``len(out) // k`` bytes).
            done: None, or a writable buffer whose first byte is set to 1
                once every column is done (so that a caller can tell an
                exception raised as the call returned, such as Ctrl-C, from
                one it raised, when nothing was written).

        Raises:
            ValueError: ``k > n``, or a buffer that does not hold its rows
                (nothing is written then).
            TypeError, BufferError: a column or out that is not a writable
                contiguous buffer.
        """
        fn = getattr(self.backend, "shuffle_take", None) or self.fallback.shuffle_take
        if done is None:
            fn(n, _uint64_vector(raw), tuple(cols), tuple(outs))
        else:
            fn(n, _uint64_vector(raw), tuple(cols), tuple(outs), done)

    def shuffle_sources(self, n: int, raw: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The draws of :meth:`shuffle_take` as index moves, for columns that
        are not byte buffers (object arrays): ``(src, dst, dsrc)``, int64.

        ``out = col[src]`` are the rows drawn, in draw order, and
        ``col[dst] = col[dsrc]`` (the right side gathered first) leaves
        ``col`` as :meth:`shuffle_take` does; ``dst`` are the slots the
        moves wrote, in the order first written (at most ``k``).

        Raises:
            ValueError: ``k > n``.
        """
        draws = _uint64_vector(raw)
        k = draws.shape[0]
        src, dst, dsrc = np.empty(k, np.int64), np.empty(k, np.int64), np.empty(k, np.int64)
        fn = getattr(self.backend, "shuffle_sources", None) or self.fallback.shuffle_sources
        m = int(fn(n, draws, src, dst, dsrc))
        return src, dst[:m], dsrc[:m]

    # ----------------------------------------------------------- line ends
    def find_byte(self, buf: Any, start: int, byte: int) -> np.ndarray:
        """The positions ``i >= start`` where ``buf[i] == byte``, ascending, as
        a writable int64 array (TextLineReader's newline index). The C core
        searches with ``memchr``, the GIL released.

        Raises:
            ValueError: ``start`` outside ``[0, len(buf)]`` or ``byte``
                outside ``[0, 255]``.
        """
        fn = getattr(self.backend, "find_byte", None) or self.fallback.find_byte
        return np.frombuffer(fn(_byte_view(buf), int(start), int(byte)), dtype=np.int64)

    # ------------------------------------------------------------- reading
    def read_window(self, fd: int, offset: int, tail: Any, n: int) -> tuple[bytes, int, int]:
        """``tail`` followed by up to ``n`` bytes of file ``fd`` at ``offset``, as one
        new bytes object: ``(window, got, errno)``.

        The bytes are read by ``pread`` (the file position is neither used nor
        moved) straight into the new object, so each byte of the file is
        copied once (the C core; its twin joins pieces). ``got < n`` at the
        end of the file, or before an OS error (``errno`` != 0: the bytes read
        before it are in the window).

        Raises:
            ValueError: a negative ``n`` or ``offset``.
        """
        # A C core built without pread (not POSIX) lacks it: the twin's then.
        fn = getattr(self.backend, "read_window", None) or self.fallback.read_window
        window, got, err = fn(int(fd), int(offset), _byte_view(tail), int(n))
        return window, int(got), int(err)

    # ------------------------------------------------------------- images
    def resample_bilinear(
        self,
        src: Any,
        shape: tuple[int, int],
        row_stride: int,
        pixel_stride: int,
        box: tuple[float, float, float, float],
        out: np.ndarray,
        flip: bool = False,
    ) -> None:
        """Resample ``box = (left, top, right, bottom)`` of an RGB image into ``out``.

        The image is ``shape = (h, w)`` pixels of ``src``, pixel ``(y, x)``
        channel ``c`` at byte ``y * row_stride + x * pixel_stride + c`` (RGB:
        ``pixel_stride`` 3, RGBX: 4). ``out`` is a C-contiguous uint8
        ``[oh, ow, 3]`` array, written left-right mirrored when ``flip``.
        Pillow 13's antialiased bilinear filter (its box arithmetic in C
        floats, 22-bit fixed-point weights, its pass order): the pixels of
        ``Image.resize((ow, oh), BILINEAR, box=box)`` on the ``h x w`` image,
        bit for bit. The C core runs with the GIL released.

        Raises:
            ValueError: the image does not fit ``src``, the box is empty or
                outside the image, or ``out`` is too small.
        """
        if out.dtype != np.uint8 or out.ndim != 3 or out.shape[2] != 3 or not out.flags.c_contiguous:
            raise ValueError("resample_bilinear: out must be a C-contiguous uint8 [h, w, 3] array")
        fn = getattr(self.backend, "resample_bilinear", None) or self.fallback.resample_bilinear
        fn(_byte_view(src), int(shape[0]), int(shape[1]), int(row_stride), int(pixel_stride),
           float(box[0]), float(box[1]), float(box[2]), float(box[3]),
           out, int(out.shape[0]), int(out.shape[1]), bool(flip))

    # ------------------------------------------------------------- padding
    def pad_ragged(
        self, values: Any, splits: Any, width: int | None = None, pad: Any = 0
    ) -> np.ndarray:
        """Ragged rows to a dense ``[B, width]`` array, padded with ``pad``.

        Row ``i`` is ``values[splits[i]:splits[i+1]]`` followed by ``pad``.

        Args:
            values: a 1-D array of a fixed-size dtype (not object).
            splits: int64 ``[B + 1]``, non-decreasing, within ``values``.
            width: columns; None = the longest row.
            pad: the pad value (converted to ``values.dtype``).

        Returns:
            A new ``[B, width]`` array of ``values.dtype``.

        Raises:
            ValueError: bad splits, or a row longer than ``width``.
            TypeError: an object array.
        """
        vals = np.ascontiguousarray(values)
        if vals.dtype.hasobject:
            raise TypeError("pad_ragged needs a fixed-size dtype, not object")
        if vals.ndim != 1:
            raise ValueError(f"values must be one-dimensional, got shape {vals.shape}")
        sp = _int64_vector(splits, "splits")
        if len(sp) < 1:
            raise ValueError("splits must have at least one entry")
        rows = np.diff(sp)
        if sp[0] < 0 or sp[-1] > len(vals) or np.any(rows < 0):
            raise ValueError(
                f"splits must be non-decreasing within [0, {len(vals)}]"
            )
        B = len(sp) - 1
        longest = int(rows.max()) if B else 0
        if width is None:
            width = longest
        width = int(width)
        if width < 0:
            raise ValueError(f"width must be >= 0, got {width}")
        if longest > width:
            i = int(np.argmax(rows > width))
            raise ValueError(f"row {i} has {int(rows[i])} values, more than width {width}")
        padv = np.asarray(pad, dtype=vals.dtype)
        if padv.ndim != 0:
            raise ValueError("pad must be a scalar")
        out = np.empty((B, width), dtype=vals.dtype)
        if vals.dtype.itemsize == 0 or B == 0 or width == 0:
            return out
        self.backend.pad_ragged(
            vals.view(np.uint8), vals.dtype.itemsize, sp, width, padv.tobytes(), out.view(np.uint8)
        )
        return out


def _object_array(items: list[Any]) -> np.ndarray:
    out = np.empty(len(items), dtype=object)
    out[:] = items
    return out


def _request(f: FeatureRequest | tuple[Any, ...]) -> FeatureRequest:
    r = FeatureRequest(*f)
    name = r.name.encode("utf-8") if isinstance(r.name, str) else bytes(r.name)
    kind = int(r.kind)
    if kind not in (KIND_BYTES, KIND_FLOAT, KIND_INT64):
        raise ValueError(f"feature {name!r}: kind must be 1 (bytes), 2 (float) or 3 (int64), got {kind}")
    fixed = -1 if kind == KIND_BYTES else int(r.fixed)
    if fixed < -1:
        raise ValueError(f"feature {name!r}: fixed must be >= 0, or -1 for var-len, got {fixed}")
    return FeatureRequest(name, kind, fixed)
