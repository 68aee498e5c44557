"""The state format, and the batcher's part that writes and restores it.

``docs/resume.md`` is the guide; in short, a pipeline's state is the state
of its batcher's stage (:class:`BatcherPart`), plain data::

    {"format": "feedq.resume/1",
     "fingerprint": {"batcher": {...}, "producer": {...}},   # mismatch -> error
     "taken": k,                          # evaluations delivered
     "producer": {"seed": s, "next": d},  # replayable orders; stream position
     "units": bytes,                      # int64 ids of units not closed
     "skips": {"index", "counts", "ranges"},  # their delivered records (ranges)
     "worklist": [...],                   # values of work-list units (elastic)
     "inputs": [...] or None,             # a file producer's names, while small
     "inputs_digest": None or {"count", "sha256", "chunk", "crcs"},  # its list
     "shard": None or {"rank", "world"},  # set by reshard_states, kept after
     "exact": None or {"last", "buffer", "rng", "fed"}}

*Any mode* restore re-reads the units not closed (skipping their delivered
records) and continues the stream at ``next``: every record not delivered
comes exactly once. *Exact mode* (one source, one runner thread) restores
the shuffle buffer's positions in storage order and its generator, and
continues the stream after the last row fed, so the batches are the ones an
uninterrupted run would have delivered.

A file producer's list is named by ``inputs_digest`` (its length, SHA-256
and a table of chunk CRCs: ``feedq._resume.filelist``), and listed in
``inputs`` only while its names total at most 16 KiB, so that a state does
not grow with the list. States written before digests list every name in
``inputs`` and no ``inputs_digest``; they load as they did.
"""

from __future__ import annotations

import copy
from typing import Any, Protocol

import numpy as np

from feedq._resume import positions as layout
from feedq._resume.filelist import FileList, check_digest, to_bytes, to_text
from feedq._resume.ledger import AnyView, Ledger, Snapshot, pack, unpack
from feedq._resume.producer import ProducerPart
from feedq._resume.report import Report
from feedq.errors import FailedPreconditionError, InvalidArgumentError
from feedq.runners import QueueRunner

__all__: list[str] = []

FORMAT = "feedq.resume/1"
# Producer fingerprint entries an elastic (re-sharded) state does not hold.
_SHARD_KEYS = ("elements", "inputs_crc32", "arrays")


class Shuffled(Protocol):
    """What exact resumption needs of a batcher's shuffle buffer
    (``feedq.input._shuffle.ShuffleBuffer``, above this package)."""

    def track(self, ledger: Ledger) -> None:
        """Keep the buffer's snapshots by draw for ``ledger``."""

    def restore(self, snap: Snapshot) -> None:
        """Before anything is put: the buffer's saved contents and generator."""


class BatcherPart:
    """State and restore of one resumable batcher's stage.

    Args:
        producer: the pipeline's producer's part (None: none was built first).
        shuffle: the batcher's shuffle buffer in exact mode, else None.
        fingerprint: the batcher's shape (kinds, sizes, seeds, specs).
        exact: one source and one runner thread (a deterministic order).
    """

    def __init__(
        self,
        producer: ProducerPart | None,
        shuffle: Shuffled | None,
        fingerprint: dict[str, Any],
        exact: bool,
    ) -> None:
        self.producer = producer
        self.ledger = Ledger(single=True if producer is None else producer.single)
        self.shuffle = shuffle
        self.exact = exact
        self.fingerprint = fingerprint
        self._base_last: int | None = None  # FIFO exact: the last position before ticket 0
        self._loaded = False
        if producer is None:
            self.ledger.untrace("the batcher was built before any producer of the pipeline")
        if shuffle is not None:
            shuffle.track(self.ledger)

    # -- runner side --------------------------------------------------------------

    def note(self, report: Report) -> None:
        """One evaluation of a source: hand-outs and unit sizes."""
        self.ledger.note(report, self.producer)

    def row_positions(self, report: Report, rows: int) -> np.ndarray[Any, Any]:
        """Positions of the ``rows`` rows an evaluation gave (-1 if unknown)."""
        positions = report.row_positions()
        if positions is None or positions.shape[0] != rows:
            got = "mixed" if positions is None else str(positions.shape[0])
            self.ledger.untrace(
                f"a batcher's source gave {rows} rows but its readers and producer reported "
                f"{got} positions (a function that filters, repeats or makes up rows, or reads "
                "without a reader over the pipeline's producer, cannot be resumed)"
            )
            return np.full(rows, -1, dtype=np.int64)
        return positions

    # -- consumer side ------------------------------------------------------------

    def on_take(self, taken: np.ndarray[Any, Any]) -> None:
        """The stage handed out one evaluation: file its rows' positions."""
        self.ledger.deliver(taken)

    # -- state --------------------------------------------------------------------

    def state_dict(self, upto: int | None) -> dict[str, Any]:
        """The state as of ticket ``upto`` (see the module docstring)."""
        upto = self.ledger.check_upto(upto)
        producer = self.producer
        assert producer is not None
        if producer.overflow:
            raise InvalidArgumentError(
                f"this pipeline cannot be resumed: its producer emitted more than "
                f"{layout.WORKLIST_BASE} elements (epochs x elements), more than positions can name"
            )
        view = self.ledger.any_view(upto)
        files = producer.files()
        units = view.units.copy()
        worklist: list[Any] = []
        wl = np.flatnonzero(units >= layout.WORKLIST_BASE)
        for k, i in enumerate(wl.tolist()):
            worklist.append(producer.value_of(int(units[i])))
            units[i] = layout.WORKLIST_BASE + k
        index, counts, ranges = [], [], []
        for i, u in enumerate(view.units.tolist()):
            r = view.skips.get(u)
            if r is not None:
                index.append(i)
                counts.append(r.shape[0])
                ranges.append(r.reshape(-1))
        state: dict[str, Any] = {
            "format": FORMAT,
            "fingerprint": {"batcher": dict(self.fingerprint), "producer": producer.fingerprint()},
            "taken": upto,
            "producer": {"seed": producer.seed, "next": view.next},
            "units": pack(units),
            "skips": {
                "index": pack(np.asarray(index, dtype=np.int64)),
                "counts": pack(np.asarray(counts, dtype=np.int64)),
                "ranges": pack(np.concatenate(ranges) if ranges else np.zeros(0, dtype=np.int64)),
            },
            "worklist": [_plain(v) for v in worklist],
            "inputs": None if files is None else files.inputs(),
            "inputs_digest": None if files is None else files.digest(),
            "shard": producer.shard,
            "exact": self._exact_part(upto) if self.exact else None,
        }
        return state

    def _exact_part(self, upto: int) -> dict[str, Any] | None:
        if self.shuffle is None:
            last = self._base_last if upto == 0 else self.ledger.last_position(upto)
            if last is not None and (last >> layout.UNIT_SHIFT) >= layout.WORKLIST_BASE:
                return None
            return {"last": last, "buffer": None, "rng": None, "fed": 0}
        snap = self.ledger.snapshot(upto)
        units = snap.buffer >> layout.UNIT_SHIFT
        if (units >= layout.WORKLIST_BASE).any() or (
            snap.last is not None and (snap.last >> layout.UNIT_SHIFT) >= layout.WORKLIST_BASE
        ):
            return None
        return {"last": snap.last, "buffer": pack(snap.buffer), "rng": copy.deepcopy(snap.rng),
                "fed": snap.fed}

    # -- restore ------------------------------------------------------------------

    def load_state_dict(self, state: dict[str, Any], runners: list[QueueRunner]) -> None:
        """Restore producer and batcher before anything ran (see Stage.load_state_dict)."""
        if self.ledger.taken or any(r.started for r in runners) or (
            self.producer is not None and self.producer.started
        ):
            raise FailedPreconditionError(
                "load_state_dict() must come before the pipeline starts and before anything is "
                "taken: build it inside `with feedq.Pipeline(state=...)`, or call "
                "pipe.load_state_dict(state) before `with pipe:`"
            )
        if self.producer is None:
            raise InvalidArgumentError("this stage has no producer to restore")
        restore_producer(self.producer, state)
        self.load_batcher(state)

    def load_batcher(self, state: dict[str, Any]) -> None:
        """The batcher's part of a restore (the producer's was done first)."""
        if self._loaded:
            raise FailedPreconditionError("this stage was already restored")
        check_state(state, self.fingerprint, None)
        assert self.producer is not None
        view, worklist = _view(state, self.producer.n)
        self.ledger.load(view, len(worklist))
        exact = state["exact"]
        if self.exact and exact is not None:
            self._base_last = exact["last"]
            if self.shuffle is not None:
                self.shuffle.restore(Snapshot(unpack(exact["buffer"]), exact["rng"],
                                               int(exact["fed"]), exact["last"]))
        self._loaded = True


#: Keys every state has (``exact`` and ``worklist`` may hold None / []).
_REQUIRED = ("producer", "units", "skips", "worklist", "exact")


def check_state(
    state: Any, batcher: dict[str, Any] | None, producer: dict[str, Any] | None,
    files: FileList | None = None,
) -> None:
    """A state from this pipeline's shape, or InvalidArgumentError naming
    what differs (``files``: the producer's file list, compared with the
    state's and the first difference named; not for re-sharded states,
    whose lists :func:`restore_producer` compares)."""
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise InvalidArgumentError(
            f"not a feedq pipeline state (format {state.get('format') if isinstance(state, dict) else None!r}, "
            f"expected {FORMAT!r})"
        )
    saved = state.get("fingerprint")
    if not isinstance(saved, dict) or not all(isinstance(saved.get(k), dict) for k in ("batcher", "producer")):
        raise InvalidArgumentError("not a feedq pipeline state: its fingerprint is missing or malformed")
    check_digest(state.get("inputs_digest"))
    missing = [k for k in _REQUIRED if k not in state]
    if missing:
        raise InvalidArgumentError(f"not a feedq pipeline state: it has no {', '.join(map(repr, missing))}")
    if not isinstance(state["producer"], dict) or not isinstance(state["skips"], dict):
        raise InvalidArgumentError("not a feedq pipeline state: its producer or skips are not dicts")
    diffs: list[str] = []
    if batcher is not None:
        diffs += _diff("batcher", saved["batcher"], batcher, ())
    if producer is not None:
        skip = _SHARD_KEYS if state.get("elastic") else ()
        diffs += _diff("producer", saved["producer"], producer, skip)
        if files is not None and not state.get("elastic"):
            where = files.difference(state.get("inputs"), state.get("inputs_digest"))
            if where is not None:
                diffs.append(f"producer inputs: {where}")
    if diffs:
        raise InvalidArgumentError(
            "the state is from a different pipeline: " + "; ".join(diffs)
        )


def _diff(what: str, saved: dict[str, Any], now: dict[str, Any], skip: tuple[str, ...]) -> list[str]:
    out = []
    for key in sorted(set(saved) | set(now)):
        if key in skip:
            continue
        if saved.get(key) != now.get(key):
            out.append(f"{what} {key}: saved {saved.get(key)!r}, now {now.get(key)!r}")
    return out


def _view(state: dict[str, Any], n: int) -> tuple[AnyView, list[Any]]:
    """The saved units and work list (``n``: the producer's elements)."""
    units = unpack(state["units"])
    skips_raw = state["skips"]
    index = unpack(skips_raw["index"])
    counts = unpack(skips_raw["counts"])
    ranges = unpack(skips_raw["ranges"]).reshape(-1, 2)
    skips: dict[int, np.ndarray[Any, Any]] = {}
    at = 0
    for i, c in zip(index.tolist(), counts.tolist()):
        skips[int(units[i])] = ranges[at : at + c]
        at += c
    nxt = state["producer"]["next"]
    if nxt is None:  # a re-sharded state: the next epoch from its start
        nxt = int(state["producer"]["epoch"]) * n
    return AnyView(int(nxt), units, skips), list(state["worklist"])


def restore_producer(producer: ProducerPart, state: dict[str, Any]) -> None:
    """Give the producer its restore plan (before its runner runs).

    Exact states re-emit the shuffle buffer's units (only the saved records)
    then the rest of the last fed unit, and continue after it; any-mode
    states re-emit the units not closed (without their delivered records)
    and continue at the saved stream position.
    """
    files = producer.files()
    check_state(state, None, producer.fingerprint(), files)
    if state.get("elastic"):
        where = (
            "this producer reads no files" if files is None
            else files.difference(state.get("inputs"), state.get("inputs_digest"))
        )
        if where is not None:
            shard = state.get("shard") or {}
            which = "rank r of N must read files[r::N]"
            if shard:
                r, world = shard["rank"], shard["world"]
                which = f"rank {r} of {world}: it must read files[{r}::{world}]"
            raise InvalidArgumentError(
                "this rank's files are not the ones the re-sharded state was dealt for "
                f"(the state is for {which}; {where})"
            )
    if producer.shard is None:  # rank and world of a re-sharded run, saved again
        producer.shard = state.get("shard")
    view, worklist = _view(state, producer.n)
    worklist = [to_bytes(v) for v in worklist]
    producer.reseed(int(state["producer"]["seed"]), worklist)

    def value(u: int) -> Any:
        return worklist[u - layout.WORKLIST_BASE] if u >= layout.WORKLIST_BASE else producer.value_of(u)

    entries: list[tuple[int, Any, layout.UnitFilter | None]] = []
    exact = state["exact"]
    if exact is not None:
        if exact["buffer"] is not None:
            positions = unpack(exact["buffer"])
            units, recs = positions >> layout.UNIT_SHIFT, positions & layout.RECORD_MASK
            for u in np.unique(units).tolist():
                only = None if producer.single else np.sort(recs[units == u])
                entries.append((u, value(u), layout.UnitFilter(only=only)))
        last = exact["last"]
        if last is None:
            start = 0
        else:
            unit, rec = last >> layout.UNIT_SHIFT, last & layout.RECORD_MASK
            start = unit + 1
            if not producer.single:
                skip = np.array([[0, rec + 1]], dtype=np.int64)
                entries.append((unit, value(unit), layout.UnitFilter(skip=skip)))
    else:
        for u in view.units.tolist():
            skipped = view.skips.get(u)
            entries.append((u, value(u), None if skipped is None else layout.UnitFilter(skip=skipped)))
        start = view.next
    producer.set_plan(entries, start, worklist)


def _plain(value: Any) -> Any:
    """A producer element as plain data (text for bytes, int, or a list)."""
    if isinstance(value, (bytes, np.bytes_)):
        return to_text(value)
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return value
