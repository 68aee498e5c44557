"""parse_single_sequence_example / parse_sequence_example (TF2's semantics).

A ``tf.train.SequenceExample`` holds ``context`` features (one Features map,
as an Example) and ``feature_lists``: per key, one Feature per time step.
AudioSet and YouTube-8M frame-level files are written this way.

Records are parsed by protobuf (the message class is built at run time by
:mod:`feedq.readers._example_pb`; TensorFlow is not needed). The context
goes through the Example assembly (P1-P3: same checks, same messages, same
outputs). Feature lists become the same per-column intermediate with one
*row per time step*, so a VarLenFeature or RaggedFeature is built by the
Example code over steps and then grouped by record:

* ``FixedLenSequenceFeature(shape)``: every step holds exactly prod(shape)
  values: ``[T] + shape`` (one record) or ``[B, T_max] + shape`` padded with
  0 / ``b""``; ``parse_sequence_example`` also returns each record's T in its
  lengths dict. ``allow_missing=True`` makes a missing list empty, else it
  is an error. ``default_value`` must be None (TF's rule: steps are never
  filled in, padding is zeros).
* ``VarLenFeature``: a :class:`SparseTensorValue` with indices (step, position),
  or (record, step, position) for a batch.
* ``RaggedFeature``: ``[T, (values)]`` / ``[B, (T), (values)]``; partition keys
  name feature lists too, cut each step's values, and must have the same
  number of steps as the values.

Errors are ``InvalidArgumentError`` with TF's wording for one record; in a
batch they start with ``Record: i, `` (where TF writes the record's name).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from feedq.errors import InvalidArgumentError
from feedq.readers._example import _assemble, _fmap_row, _parsed_from_rows, _records
from feedq.readers._example_composite import _ragged_rows, _splits
from feedq.readers._example_pb import sequence_example_class
from feedq.readers._example_spec import (
    FixedLenFeature,
    FixedLenSequenceFeature,
    RaggedFeature,
    RaggedTensorValue,
    SparseTensorValue,
    VarLenFeature,
    _Plan,
    _RaggedOut,
    _Spec,
)
from feedq.readers._example_wire import _BYTES, _KIND_DTYPE, _KIND_NAME, _ONEOF, _Parsed

__all__ = ["parse_sequence_example", "parse_single_sequence_example"]

_CONTEXT = (FixedLenFeature, VarLenFeature, RaggedFeature)
_SEQUENCE = (FixedLenSequenceFeature, VarLenFeature, RaggedFeature)


class _Steps:
    """One feature-list column of a batch: steps per record and a per-step :class:`_Parsed`."""

    __slots__ = ("nsteps", "off", "parsed", "present")

    def __init__(self, present: np.ndarray, nsteps: np.ndarray, parsed: _Parsed) -> None:
        self.present = present
        self.nsteps = nsteps
        self.off = np.concatenate([[0], np.cumsum(nsteps)]).astype(np.int64)
        self.parsed = parsed

    def locate(self, step: int) -> tuple[int, int]:
        """(record, time) of a global step index."""
        r = int(np.searchsorted(self.off[1:], step, side="right"))
        return r, step - int(self.off[r])


def _parse_records(
    serialized: Any, ctx: _Plan, seq: _Plan, single: bool
) -> tuple[list[list[tuple[int, Any]]], list[_Steps], tuple[int, ...], tuple[int, str] | None]:
    """Protobuf-parse the records: context rows, feature-list columns, batch shape.

    At a record that is not a SequenceExample parsing stops: the records
    before it are returned (their errors come first) with its error.
    """
    from google.protobuf.message import DecodeError

    data, starts, ends, _, shape = _records(serialized)
    cls = sequence_example_class()
    ctx_rows: list[list[tuple[int, Any]]] = []
    present: list[list[bool]] = [[] for _ in seq.specs]
    nsteps: list[list[int]] = [[] for _ in seq.specs]
    steps: list[list[tuple[int, Any]]] = [[] for _ in seq.specs]
    failed = None
    for r, (a, b) in enumerate(zip(starts.tolist(), ends.tolist())):
        ex = cls()
        try:
            ex.ParseFromString(data[a:b])
        except (DecodeError, ValueError, RuntimeError):
            shown = repr(data[a:b][:512])[2:-1]
            failed = (r, f"{_where(r, single)}Could not parse sequence example input, value: '{shown}'")
            break
        ctx_rows.append(_fmap_row(ex.context.feature, ctx.specs))
        lmap = ex.feature_lists.feature_list
        for ci, sp in enumerate(seq.specs):
            fl = lmap[sp.key].feature if sp.key in lmap else None
            present[ci].append(fl is not None)
            nsteps[ci].append(0 if fl is None else len(fl))
            col = steps[ci]
            for f in fl or ():
                which = f.WhichOneof("kind")
                col.append((0, ()) if which is None else (_ONEOF[which], getattr(f, which).value))
    cols = [
        _Steps(np.array(present[ci], dtype=bool), np.array(nsteps[ci], dtype=np.int64), _step_parsed(steps[ci], sp))
        for ci, sp in enumerate(seq.specs)
    ]
    return ctx_rows, cols, shape, failed


def _step_parsed(steps: list[tuple[int, Any]], sp: _Spec) -> _Parsed:
    kind = np.fromiter((k for k, _ in steps), dtype=np.int8, count=len(steps))
    count = np.fromiter((len(v) for _, v in steps), dtype=np.int64, count=len(steps))
    flat: list[Any] = []
    for k, v in steps:
        if k == sp.kind:
            flat.extend(v)
    if sp.kind == _BYTES:
        vals = np.empty(len(flat), dtype=object)
        vals[:] = [bytes(x) for x in flat]
    else:
        vals = np.array(flat, dtype=_KIND_DTYPE[sp.kind])
    return _Parsed(kind, count, vals)


def _where(record: int, single: bool) -> str:
    return "" if single else f"Record: {record}, "


def _check(
    seq: _Plan, cols: list[_Steps], allow_missing: Mapping[str, bool], single: bool
) -> list[tuple[int, str]]:
    """Feature-list errors (TF's wording) as (record, message), first record first.

    Per record, TF's order of checks: a missing list, the steps' types, a
    list's total count (dense lists), then each step's count.
    """
    errors: list[tuple[int, int, int, int, str]] = []  # (record, column, stage, step, message)
    for ci, (sp, c) in enumerate(zip(seq.specs, cols)):
        p = c.parsed
        if sp.cls == "seq" and not allow_missing[sp.key]:
            miss = np.flatnonzero(~c.present)
            if miss.size:
                r = int(miss[0])
                msg = (f"{_where(r, single)}Feature list '{sp.key}' is required but could not be "
                       "found.  Did you mean to set allow_missing=True?")
                errors.append((r, ci, -1, 0, msg))
        wrong = np.flatnonzero((p.kind != 0) & (p.kind != sp.kind))
        if wrong.size:
            r, t = c.locate(int(wrong[0]))
            msg = (f"{_where(r, single)}Feature list: {sp.key}, Index: {t}.  Data types don't match. "
                   f"Expected type: {_KIND_NAME[sp.kind]}")
            errors.append((r, ci, 0, t, msg))
        if sp.cls != "seq":
            continue
        ok = np.where(p.kind == sp.kind, p.count, 0)
        total = np.concatenate([[0], np.cumsum(ok)])[c.off]
        total = total[1:] - total[:-1]
        odd = np.flatnonzero(total % sp.n != 0)
        if odd.size:
            r = int(odd[0])
            msg = (f"{_where(r, single)}Feature list '{sp.key}' has an unexpected number of values.  "
                   f"Total values size: {int(total[r])} is not consistent with output shape: "
                   f"[?,{sp.shape_text()[1:]}")
            errors.append((r, ci, 1, 0, msg))
        # A step with no kind holds no values: a count error for a dense list.
        cnt = np.flatnonzero(((p.kind == 0) | (p.kind == sp.kind)) & (p.count != sp.n))
        if cnt.size:
            r, t = c.locate(int(cnt[0]))
            msg = (f"{_where(r, single)}Key: {sp.key}, Index: {t}.  Number of values != expected.  "
                   f"values size: {int(p.count[int(cnt[0])])} but output shape: {sp.shape_text()}")
            errors.append((r, ci, 2, t, msg))
    return [(e[0], e[4]) for e in sorted(errors)]


def _dense(sp: _Spec, c: _Steps, B: int, single: bool) -> np.ndarray:
    """A FixedLenSequenceFeature: ``[T] + shape`` or ``[B, T_max] + shape`` zero-padded."""
    vals = c.parsed.values.reshape((-1,) + sp.shape)
    if single:
        return vals
    T = int(c.nsteps.max()) if B else 0
    res = np.empty((B, T) + sp.shape, dtype=_KIND_DTYPE[sp.kind])
    res[...] = sp.default
    rows = np.repeat(np.arange(B, dtype=np.int64), c.nsteps)
    t = np.arange(len(rows), dtype=np.int64) - np.repeat(c.off[:-1], c.nsteps)
    res[rows, t] = vals
    return res


def _sparse(sp: _Spec, c: _Steps, B: int, single: bool) -> SparseTensorValue:
    """A VarLenFeature: indices (step, position), or (record, step, position)."""
    p = c.parsed
    counts = np.where(p.kind == sp.kind, p.count, 0)
    step = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
    pos = np.arange(len(step), dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
    rec = np.repeat(np.arange(B, dtype=np.int64), c.nsteps)[step]
    t = step - c.off[rec]
    width = int(counts.max()) if len(counts) else 0
    if single:
        T = int(c.nsteps[0]) if B else 0
        return SparseTensorValue(np.stack([t, pos], axis=1), p.values, np.array([T, width], dtype=np.int64))
    T = int(c.nsteps.max()) if B else 0
    return SparseTensorValue(np.stack([rec, t, pos], axis=1), p.values, np.array([B, T, width], dtype=np.int64))


def _ragged(
    name: str, o: _RaggedOut, seq: _Plan, cols: list[_Steps], B: int, single: bool
) -> tuple[RaggedTensorValue | None, tuple[int, str] | None]:
    """A RaggedFeature over steps: ``[T, ...]`` or ``[B, (T), ...]``, or (record, error)."""
    vc = cols[o.value]
    for kind, arg in o.partitions:
        if kind == "uniform":
            continue
        differ = np.flatnonzero(cols[arg].nsteps != vc.nsteps)
        if differ.size:
            r = int(differ[0])
            msg = (f"{_where(r, single)}Key: {name}.  Feature list {seq.specs[arg].key} has "
                   f"{int(cols[arg].nsteps[r])} steps but feature list {seq.specs[o.value].key} "
                   f"has {int(vc.nsteps[r])}.")
            return None, (r, msg)
    inner, top, err = _ragged_rows(o, seq.specs, [c.parsed for c in cols], int(vc.off[-1]))
    if err is not None:
        r, t = vc.locate(err[0])
        return None, (r, f"{_where(r, single)}Key: {name}, Index: {t}.  {err[1]}")
    per_step = RaggedTensorValue(inner, _splits(top, o.splits_dtype))
    if single:
        return per_step, None
    return RaggedTensorValue(per_step, _splits(vc.nsteps, o.splits_dtype)), None


def _parse(
    serialized: Any,
    context_features: Mapping[str, Any] | None,
    sequence_features: Mapping[str, Any] | None,
    single: bool,
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any], tuple[int, ...]]:
    sequence_features = sequence_features or {}
    for key, feat in sequence_features.items():
        if isinstance(feat, FixedLenSequenceFeature) and feat.default_value is not None:
            raise ValueError(
                f"Feature list {key}: default_value must be None (steps are padded with zeros); "
                f"got {feat.default_value!r}"
            )
    ctx = _Plan(context_features or {}, _CONTEXT, "context feature")
    seq = _Plan(sequence_features, _SEQUENCE, "sequence feature")
    allow = {k: bool(f.allow_missing) for k, f in sequence_features.items() if isinstance(f, FixedLenSequenceFeature)}
    ctx_rows, cols, shape, failed = _parse_records(serialized, ctx, seq, single)
    B = len(ctx_rows)
    errors = _check(seq, cols, allow, single)
    if failed is not None:
        errors.append(failed)
    bad_cols = {ci for ci, (sp, c) in enumerate(zip(seq.specs, cols))
                if np.any((c.parsed.kind != 0) & (c.parsed.kind != sp.kind))}
    lists: dict[str, Any] = {}
    lengths: dict[str, Any] = {}
    for name, o in seq.outputs:
        if isinstance(o, _RaggedOut):
            if bad_cols.intersection([o.value] + [a for k, a in o.partitions if k != "uniform"]):
                continue  # its steps' types are wrong: reported by _check
            lists[name], err = _ragged(name, o, seq, cols, B, single)
            if err is not None:
                errors.append(err)
        elif errors:
            continue  # nothing is returned: skip the work
        elif isinstance(o, int):
            sp, c = seq.specs[o], cols[o]
            if sp.cls == "seq":
                lists[name] = _dense(sp, c, B, single)
                lengths[name] = c.nsteps.copy()
            else:
                lists[name] = _sparse(sp, c, B, single)
    # The context's errors of a record come before its feature lists' (TF parses the context first).
    context = _assemble(ctx, _parsed_from_rows(ctx_rows, ctx.specs), B, single, later=sorted(errors))
    return context, lists, lengths, shape


def parse_single_sequence_example(
    serialized: Any,
    context_features: Mapping[str, Any] | None = None,
    sequence_features: Mapping[str, Any] | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Parse one serialized ``tf.train.SequenceExample``.

    Args:
        serialized: the record (bytes, str or a 0-d object array).
        context_features: name -> :class:`FixedLenFeature`,
            :class:`VarLenFeature` or :class:`RaggedFeature`, read from the
            context as :func:`parse_single_example` reads an Example.
        sequence_features: feature list name -> :class:`FixedLenSequenceFeature`
            (``[T] + shape``), :class:`VarLenFeature` (indices ``[N, 2]`` =
            (step, position), dense shape ``[T, max_len]``) or
            :class:`RaggedFeature` (``[T, (values)]``).

    Returns:
        (context dict, feature lists dict).

    Raises:
        InvalidArgumentError: bytes that are not a SequenceExample; a
            missing feature list without ``allow_missing``; a step of the
            wrong type or value count; context errors as parse_single_example's.
        TypeError: an unsupported dtype or feature class.
        ValueError: a feature class not allowed where given (e.g. a
            FixedLenFeature in sequence_features), a FixedLenSequenceFeature
            with a default_value in sequence_features.
    """
    if isinstance(serialized, np.ndarray):
        serialized = serialized.item()
    rec = serialized.encode() if isinstance(serialized, str) else bytes(serialized)
    context, lists, _, _ = _parse([rec], context_features, sequence_features, single=True)
    return context, lists


def parse_sequence_example(
    serialized: Any,
    context_features: Mapping[str, Any] | None = None,
    sequence_features: Mapping[str, Any] | None = None,
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """Parse a batch of serialized ``tf.train.SequenceExample`` records.

    Args:
        serialized: a ``[B]`` array/list of bytes, or a :class:`RecordBlock`
            from :class:`TFRecordReader`.
        context_features: as :func:`parse_single_sequence_example`; outputs as
            :func:`parse_example`'s (``[B] + shape``, sparse ``[B, max_len]``,
            ragged ``[B, (values)]``).
        sequence_features: feature list name -> :class:`FixedLenSequenceFeature`
            (``[B, T_max] + shape``, padded with 0 / ``b""``),
            :class:`VarLenFeature` (indices ``[N, 3]`` = (record, step,
            position), dense shape ``[B, T_max, max_len]``) or
            :class:`RaggedFeature` (``[B, (T), (values)]``).

    Returns:
        (context dict, feature lists dict, lengths dict): lengths holds, for
        every FixedLenSequenceFeature, the int64 ``[B]`` step counts (TF2's
        ``tf.io.parse_sequence_example``).

    Raises:
        Same as :func:`parse_single_sequence_example`; feature-list messages
        start with ``Record: i, ``.
    """
    context, lists, lengths, shape = _parse(serialized, context_features, sequence_features, single=False)
    if len(shape) != 1:
        raise InvalidArgumentError(f"parse_sequence_example expects a vector of records, got shape {shape}")
    return context, lists, lengths
