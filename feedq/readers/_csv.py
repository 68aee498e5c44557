"""decode_csv (D1-D8): a per-record reference path and a pyarrow block path.

The per-record path is a port of TF's ``DecodeCSVOp::ExtractFields`` and
its number parsing, and defines the semantics (and the error messages).
The block path hands a whole block of lines to ``pyarrow.csv.read_csv`` in
one call. It is used only where it provably agrees with the per-record
path: guards send a block with anything pyarrow would read differently
(stray quotes, lone carriage returns, empty lines, a required column left
empty, a value pyarrow rejects) to the per-record path, which then gives the
same values or TF's error for the record at fault.
"""

from __future__ import annotations

import itertools
import math
import re
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from feedq.errors import InvalidArgumentError
from feedq.readers._block import RecordBlock

__all__ = ["decode_csv"]

_WS = rb"[ \t\n\v\f\r]*"
_INT_RE = re.compile(_WS + rb"([+-]?[0-9]+)" + _WS)
# TF parses floats with strtod-like rules (verified against TF 2.21):
# decimal and exponent forms, ".5", "5.", hex floats, inf/infinity, nan and
# nan(...), any case, surrounding whitespace.
_FLOAT_RE = re.compile(
    _WS
    + rb"([+-]?)(?:((?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)"
    + rb"|(0[xX](?:[0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)(?:[pP][+-]?[0-9]+)?)"
    + rb"|([iI][nN][fF](?:[iI][nN][iI][tT][yY])?)"
    + rb"|([nN][aA][nN](?:\([0-9A-Za-z_]*\))?))"
    + _WS
)

_TYPE_NAMES = {
    np.dtype(np.int32): "int32",
    np.dtype(np.int64): "int64",
    np.dtype(np.float32): "float",
    np.dtype(np.float64): "double",
}
_INT_RANGE = {
    np.dtype(np.int32): (-(2**31), 2**31 - 1),
    np.dtype(np.int64): (-(2**63), 2**63 - 1),
}
_STRING = np.dtype(object)


class _Column:
    __slots__ = ("default", "dtype")

    def __init__(self, dtype: np.dtype, default: Any) -> None:
        self.dtype = dtype
        self.default = default  # None = required column (D2)


def _rank(d: Any) -> int:
    # The rank of a default as TF sees it: nested lists/tuples count.
    if isinstance(d, np.ndarray):
        return d.ndim
    if isinstance(d, (list, tuple)):
        return 1 + max((_rank(v) for v in d), default=0)
    return 0


def _column_spec(i: int, d: Any) -> _Column:
    # D1: Python int -> int32, float -> float32, str/bytes -> string; NumPy
    # scalars and arrays keep their dtype; [] (TF: float32 tensor) -> required float32.
    rank = _rank(d)
    if rank > 1:
        # TF: "Shape must be at most rank 1 but is rank 2".
        raise InvalidArgumentError(
            f"record_defaults[{i}] must be at most rank 1 (one value, or empty for a "
            f"required column) but is rank {rank}"
        )
    if isinstance(d, np.ndarray):
        values = list(d.reshape(-1))
        dtype = _norm_dtype(d.dtype)
    elif isinstance(d, (list, tuple)):
        values = list(d)
        dtype = _infer_dtype(values[0]) if values else np.dtype(np.float32)
    elif isinstance(d, (type, np.dtype)):
        values, dtype = [], _norm_dtype(np.dtype(d))
    else:
        values = [d]
        dtype = _infer_dtype(d)
    if len(values) > 1:
        raise InvalidArgumentError(
            f"There should only be 1 default per field but field {i} has {len(values)}"
        )
    if not values:
        return _Column(dtype, None)
    v = values[0]
    if dtype == _STRING:
        v = v.encode() if isinstance(v, str) else bytes(v)
    else:
        v = dtype.type(v)
    return _Column(dtype, v)


_SPECS: dict[tuple[Any, ...], list[_Column]] = {}
_SPECS_MAX = 256


def _column_specs(record_defaults: Sequence[Any]) -> list[_Column]:
    # Building the specs costs ~8 us a column (a block of 8192 lines: ~10 ns
    # a line; a batch of 256: ~300 ns a line), so defaults made of plain
    # Python scalars (the common [[0], [0.0], [""], []] form) are cached by
    # value and type; floats by their bits (-0.0 is not 0.0), finite only.
    key: list[Any] = []
    for d in record_defaults:
        if type(d) not in (list, tuple) or len(d) > 1:
            key = []
            break
        if not d:
            key.append(())
            continue
        v = d[0]
        t = type(v)
        if t is float and math.isfinite(v):
            key.append((t, v.hex()))
        elif t in (int, str, bytes):
            key.append((t, v))
        else:
            key = []
            break
    k = tuple(key) if key else None
    if k is not None:
        hit = _SPECS.get(k)
        if hit is not None:
            return hit
    cols = [_column_spec(i, d) for i, d in enumerate(record_defaults)]
    if k is not None:
        if len(_SPECS) >= _SPECS_MAX:
            _SPECS.clear()
        _SPECS[k] = cols  # read only: callers never change the specs
    return cols


def _norm_dtype(dt: np.dtype) -> np.dtype:
    if dt.kind in "OSU":
        return _STRING
    if dt not in _TYPE_NAMES:
        raise TypeError(
            f"record_defaults dtype must be float32, float64, int32, int64 or string, got {dt}"
        )
    return dt


def _infer_dtype(v: Any) -> np.dtype:
    if isinstance(v, (str, bytes, np.str_, np.bytes_)):
        return _STRING
    if isinstance(v, np.generic):
        return _norm_dtype(v.dtype)
    if isinstance(v, bool):
        raise TypeError("record_defaults cannot be bool")
    if isinstance(v, int):
        return np.dtype(np.int32)
    if isinstance(v, float):
        return np.dtype(np.float32)
    raise TypeError(f"unsupported record_defaults value {v!r}")


def _text(b: bytes) -> str:
    # A field as shown in a message: control bytes such as NUL escaped
    # ("4\\x005"), so that the message shows what the field holds.
    text = b.decode("utf-8", "backslashreplace")
    return text if text.isprintable() else "".join(
        c if c.isprintable() else repr(c)[1:-1] for c in text
    )


def _extract_fields(
    rec: bytes, delim: int, quote: bool, select: Sequence[int] | None, i: int
) -> list[bytes]:
    """Split one record as TF's ExtractFields does (D6, D8), quirks included."""
    result: list[bytes] = []
    n = len(rec)
    idx = 0
    parsed = 0
    sel_i = 0

    def fail(msg: str) -> InvalidArgumentError:
        return InvalidArgumentError(f"{msg} in record {i}")

    if n == 0:
        return result
    while idx < n:
        c = rec[idx]
        if c in (10, 13):  # TF skips CR/LF at the start of a field
            idx += 1
            continue
        include = select is None or (sel_i < len(select) and select[sel_i] == parsed)
        quoted = quote and c == 34
        if quoted:
            idx += 1
            field = bytearray()
            while idx < n - 1 and (rec[idx] != 34 or rec[idx + 1] != delim):
                if rec[idx] != 34:
                    field.append(rec[idx])
                    idx += 1
                else:
                    if rec[idx + 1] != 34:
                        raise fail("Quote inside a string has to be escaped by another quote")
                    field.append(34)
                    idx += 2
            if not (idx < n and rec[idx] == 34 and (idx == n - 1 or rec[idx + 1] == delim)):
                raise fail("Quoted field has to end with quote followed by delim or end")
            idx += 2
            value = bytes(field)
        else:
            j = rec.find(delim.to_bytes(1, "little"), idx)
            j = n if j < 0 else j
            value = rec[idx:j]
            if (quote and 34 in value) or 10 in value or 13 in value:
                raise fail("Unquoted fields cannot have quotes/CRLFs inside")
            idx = j + 1
        parsed += 1
        if include:
            result.append(value)
            if select is not None:
                sel_i += 1
                if sel_i == len(select):
                    return result
    # A trailing delimiter leaves one more (empty) field.
    if rec[n - 1] == delim and (
        select is None or (sel_i < len(select) and select[sel_i] == parsed)
    ):
        result.append(b"")
    return result


def _convert(field: bytes, col: _Column, f: int, i: int) -> Any:
    dt = col.dtype
    if dt == _STRING:
        return field
    if dt.kind == "i":
        m = _INT_RE.fullmatch(field)
        v = int(m.group(1)) if m else None
        lo, hi = _INT_RANGE[dt]
        if v is None or not lo <= v <= hi:
            raise InvalidArgumentError(
                f"Field {f} in record {i} is not a valid {_TYPE_NAMES[dt]}: {_text(field)}"
            )
        return v
    m = _FLOAT_RE.fullmatch(field)
    if m is None:
        raise InvalidArgumentError(
            f"Field {f} in record {i} is not a valid {_TYPE_NAMES[dt]}: {_text(field)}"
        )
    sign = -1.0 if m.group(1) == b"-" else 1.0
    if m.group(2) is not None:
        return sign * float(m.group(2))
    if m.group(3) is not None:
        return sign * float.fromhex(m.group(3).decode())
    if m.group(4) is not None:
        return sign * math.inf
    return math.copysign(math.nan, sign)


def _per_record(
    flat: list[bytes],
    cols: list[_Column],
    delim: int,
    quote: bool,
    na: bytes,
    select: Sequence[int] | None,
    name: Callable[[int], str] | None = None,
) -> list[list[Any]]:
    """The reference path. ``name(i)`` names record ``i`` in errors (its
    key, ``file:line``, for a reader's block); default ``"record i"`` (TF)."""
    out: list[list[Any]] = [[] for _ in cols]
    ncols = len(cols)
    for i, rec in enumerate(flat):
        # Errors say "in record i"; a block's key replaces that where one is at fault.
        try:
            fields = _extract_fields(rec, delim, quote, select, i)
            if len(fields) != ncols:
                raise InvalidArgumentError(
                    f"Expect {ncols} fields but have {len(fields)} in record {i}"
                )
            for f, (field, col) in enumerate(zip(fields, cols)):
                if not field or (na and field == na):
                    if col.default is None:
                        raise InvalidArgumentError(
                            f"Field {f} is required but missing in record {i}!"
                        )
                    out[f].append(col.default)
                else:
                    out[f].append(_convert(field, col, f, i))
        except InvalidArgumentError as exc:
            if name is None:
                raise
            raise InvalidArgumentError(_rename(exc.message, i, name(i))) from None
    return out


def _rename(message: str, i: int, where: str) -> str:
    # "... in record 7 ..." -> "... in a.csv:20002 ..." (the first mention).
    return message.replace(f" in record {i}", f" in {where}", 1)


def _block_names(block: RecordBlock) -> Callable[[int], str]:
    # A reader's block knows each record's key: the file and line (or offset).
    wu = block.work_unit.decode("utf-8", "backslashreplace")
    if block.bare_keys:
        return lambda i: wu
    return lambda i: f"{wu}:{int(block.key_ids[i])}"


def _to_array(values: list[Any], col: _Column, shape: tuple[int, ...]) -> np.ndarray:
    if col.dtype == _STRING:
        arr = np.empty(len(values), dtype=object)
        arr[:] = values
        return arr.reshape(shape)
    if col.dtype.kind == "f":
        with np.errstate(over="ignore"):  # "1e39" as float32 is inf, as in TF
            return np.array(values, dtype=np.float64).astype(col.dtype).reshape(shape)
    return np.array(values, dtype=col.dtype).reshape(shape)


class _InFlight:
    """How many threads are inside a pyarrow block parse now."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.count = 0  # guarded by self._lock

    def __enter__(self) -> None:
        with self._lock:
            self.count += 1

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self.count -= 1


_decoding = _InFlight()


def _pool_helps() -> bool:
    # pyarrow's CPU pool (one thread a core) lets a lone parse use every core
    # (a block of 8192 lines: ~1.4 cores); while other threads parse too, the
    # cores are busy already and the pool only adds hand-offs (3-8 % more
    # CPU a line). docs/design.md, "CSV decoding cost".
    import pyarrow as pa

    return _decoding.count <= 1 and pa.cpu_count() > 1


_QUOTE_GUARD: dict[bytes, re.Pattern[bytes]] = {}


def _quote_guard(delim: bytes) -> re.Pattern[bytes]:
    # Lines where quotes are used exactly as TF's splitter accepts them: every
    # field fully quoted (with "" escapes) or free of quotes and CR/LF.
    pat = _QUOTE_GUARD.get(delim)
    if pat is None:
        d = re.escape(delim)
        field = rb'(?:"(?:[^"\r\n]|"")*"|[^"\r\n' + d + rb"]*)"
        line = field + rb"(?:" + d + field + rb")*\r?"
        pat = re.compile(rb"(?:" + line + rb"\n)*(?:" + line + rb")?")
        _QUOTE_GUARD[delim] = pat
    return pat


_OPTIONS: dict[tuple[Any, ...], tuple[list[str], Any, Any, Any]] = {}


def _arrow_options(
    cols: list[_Column],
    delim: bytes,
    quote: bool,
    na: bytes,
    select: Sequence[int] | None,
    threads: bool,
) -> tuple[list[str], Any, Any, Any]:
    """The column names and pyarrow's read, parse and convert options for
    these columns, made once per setting (making them took ~100 us a call,
    as much as pyarrow's own setup; pyarrow copies them, so they are shared
    read-only)."""
    key = (tuple(c.dtype for c in cols), delim, quote, na,
           None if select is None else tuple(select), threads)
    hit = _OPTIONS.get(key)
    if hit is not None:
        return hit
    import pyarrow as pa
    import pyarrow.csv as pcsv

    want = list(select) if select is not None else list(range(len(cols)))
    names = [f"f{c}" for c in want]
    arrow_type = {
        np.dtype(np.int32): pa.int32(),
        np.dtype(np.int64): pa.int64(),
        np.dtype(np.float32): pa.float32(),
        np.dtype(np.float64): pa.float64(),
        _STRING: pa.binary(),
    }
    types = {name: arrow_type[col.dtype] for name, col in zip(names, cols)}
    nulls = [""] if not na or na == b"" else ["", na.decode("latin-1")]
    made = (
        names,
        pcsv.ReadOptions(autogenerate_column_names=True, use_threads=threads),
        pcsv.ParseOptions(
            delimiter=delim.decode("latin-1"),
            quote_char='"' if quote else False,
            double_quote=True,
            escape_char=False,
            newlines_in_values=False,
            ignore_empty_lines=False,
        ),
        pcsv.ConvertOptions(
            column_types=types,
            include_columns=names,
            null_values=nulls,
            true_values=[],
            false_values=[],
            strings_can_be_null=True,
            quoted_strings_can_be_null=True,
            check_utf8=False,
        ),
    )
    if len(_OPTIONS) >= _SPECS_MAX:
        _OPTIONS.clear()
    _OPTIONS[key] = made
    return made


def _arrow_block(
    data: bytes,
    start: int,
    end: int,
    nrec: int,
    cols: list[_Column],
    delim: bytes,
    quote: bool,
    na: bytes,
    select: Sequence[int] | None,
    crlf_ends_lines: bool = True,
) -> list[np.ndarray] | None:
    """Parse the ``nrec`` lines of ``data[start:end]`` in one pyarrow call,
    or None where it could differ.

    The lines are read in place: the guards search ``data`` between
    ``start`` and ``end`` and pyarrow reads a zero-copy buffer over them.
    ``crlf_ends_lines``: the chunk is file text whose CRLF line ends are not
    part of the records (TextLineReader strips them); False for joined
    records, where any CR belongs to a record.
    """
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.csv as pcsv

    if delim in (b'"', b"\n", b"\r"):
        return None
    if data.find(b"\r", start, end) >= 0 and (
        not crlf_ends_lines
        or data.count(b"\r", start, end) != data.count(b"\r\n", start, end)
    ):
        return None  # a CR inside a record ends a row for pyarrow, not for TF
    if (
        quote
        and data.find(b'"', start, end) >= 0
        and _quote_guard(delim).fullmatch(data, start, end) is None
    ):
        return None
    if any(c.dtype.kind in "iu" for c in cols) and (
        data.find(b"x", start, end) >= 0 or data.find(b"X", start, end) >= 0
    ):
        return None  # pyarrow reads "0x1f" as an integer; TF (D4) does not
    if select is None:
        # pyarrow takes the column count from the first line and holds every
        # line to it; TF wants exactly len(cols) fields: check that line.
        nl = data.find(b"\n", start, end)
        first = data[start : end if nl < 0 else nl]
        if first.endswith(b"\r"):
            first = first[:-1]
        try:
            if len(_extract_fields(first, delim[0], quote, None, 0)) != len(cols):
                return None
        except InvalidArgumentError:
            return None
    names, read_options, parse_options, convert_options = _arrow_options(
        cols, delim, quote, na, select, _pool_helps()
    )
    try:
        table = pcsv.read_csv(
            pa.BufferReader(pa.py_buffer(memoryview(data)[start:end])),
            read_options=read_options,
            parse_options=parse_options,
            convert_options=convert_options,
        )
    except (pa.ArrowInvalid, pa.ArrowKeyError, KeyError, ValueError):
        return None
    if table.num_rows != nrec:
        return None
    out = []
    for name, col in zip(names, cols):
        arr = table.column(name)
        if arr.null_count:
            if col.default is None:
                return None  # the per-record path names the record
            default = col.default
            arr = pc.fill_null(arr, pa.scalar(default, type=arr.type))
        if isinstance(arr, pa.ChunkedArray):
            # One chunk (a block under pyarrow's 1 MiB block_size) is used as
            # it is: combine_chunks would copy it once more.
            arr = arr.chunk(0) if arr.num_chunks == 1 else arr.combine_chunks()
        out.append(_writable_column(arr, col))
    return out


def _writable_column(arr: Any, col: _Column) -> np.ndarray:
    # Callers may write into (or torch.from_numpy) the columns. A number
    # column without nulls is a view of its pyarrow buffer, which it keeps
    # alive: the table is this call's own (pyarrow allocated it for this
    # parse; nothing else holds it), and pyarrow marks such buffers mutable.
    # That saves one copy per column into fresh memory (docs/design.md,
    # "CSV decoding cost").
    if col.dtype != _STRING and arr.null_count == 0:
        data = arr.buffers()[1]
        if data is not None and data.is_mutable and arr.type.bit_width == 8 * col.dtype.itemsize:
            view: np.ndarray = np.frombuffer(
                data, dtype=col.dtype, count=len(arr), offset=arr.offset * col.dtype.itemsize
            )
            return view
    out: np.ndarray = arr.to_numpy(zero_copy_only=False, writable=True)
    return out


def decode_csv(
    records: Any,
    record_defaults: Sequence[Any],
    field_delim: str = ",",
    use_quote_delim: bool = True,
    name: str | None = None,
    na_value: str = "",
    select_cols: Sequence[int] | None = None,
) -> list[np.ndarray]:
    """Convert CSV records to columns (``tf.io.decode_csv``, D1-D8).

    ``records`` may be one record (bytes/str), an array or list of records of
    any shape, or a :class:`RecordBlock` from :class:`TextLineReader` -- the
    fast path: its lines are parsed straight from the read buffer into
    columns by pyarrow, with no per-line Python object. Arrays of records are
    joined and parsed the same way. Results equal the per-record path's.

    Args:
        records: the records (see above).
        record_defaults: one entry per output column: a value (its type sets
            the column dtype: int -> int32, float -> float32, str -> string,
            NumPy scalars keep theirs) used when the field is empty, or an
            empty list/array/dtype for a required column.
        field_delim: the one-character delimiter.
        use_quote_delim: treat double quotes as quoting (D6).
        name: unused (TF compatibility).
        na_value: a field equal to it counts as empty (D7).
        select_cols: strictly increasing column indices to parse (D8).

    Returns:
        One array per column, each shaped like ``records``.

    Raises:
        InvalidArgumentError: a bad delimiter, a record with the wrong number
            of fields, a missing required field, an unparsable number, a
            quoting error, 2+ values in one default, or a default of rank 2+.
            Messages name the record: ``in record k`` (its index, as in TF)
            for plain records, ``in <file>:<line>`` (its key) for a block
            from a reader -- the same from the pyarrow path and the
            per-record path, which reports every error.
        ValueError: ``select_cols`` not strictly increasing or of a length
            other than ``record_defaults``.
        TypeError: an unsupported default type.
    """
    delim_b = field_delim.encode() if isinstance(field_delim, str) else bytes(field_delim)
    if len(delim_b) != 1:
        raise InvalidArgumentError("field_delim should be only 1 char")
    cols = _column_specs(record_defaults)
    select: list[int] | None = None
    if select_cols is not None:
        select = [int(c) for c in select_cols]
        if any(b <= a for a, b in itertools.pairwise(select)):
            raise ValueError("select_cols is not strictly increasing.")
        if select and select[0] < 0:
            raise ValueError("select_cols must be non-negative.")
        if len(select) != len(cols):
            raise ValueError("Length of select_cols and record_defaults do not match.")
    na = na_value.encode() if isinstance(na_value, str) else bytes(na_value)
    delim = delim_b[0]

    names: Callable[[int], str] | None = None
    if isinstance(records, RecordBlock):
        names = _block_names(records)
        shape: tuple[int, ...] = (len(records),)
        lengths = records.lengths
        if records.span is not None and len(records) and not np.any(lengths == 0):
            s0, s1 = records.span
            with _decoding:
                fast = _arrow_block(
                    records.data, s0, s1, len(records), cols, delim_b, use_quote_delim, na, select
                )
            if fast is not None:
                return fast
        flat = records.values().tolist()
    else:
        arr = np.asarray(records, dtype=object)
        shape = arr.shape
        flat = [r.encode() if isinstance(r, str) else bytes(r) for r in arr.reshape(-1).tolist()]
        if len(flat) > 1 and all(flat):
            chunk = b"\n".join(flat)
            if chunk.count(b"\n") == len(flat) - 1:
                with _decoding:
                    fast = _arrow_block(
                        chunk, 0, len(chunk), len(flat), cols, delim_b, use_quote_delim, na,
                        select, False,
                    )
                if fast is not None:
                    return [a.reshape(shape) for a in fast]
    values = _per_record(flat, cols, delim, use_quote_delim, na, select, names)
    return [_to_array(v, c, shape) for v, c in zip(values, cols)]
