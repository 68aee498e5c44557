"""The producer's part: unit ids, replayable orders and the restore plan.

In a resumable pipeline a producer's queue carries, beside each element, a
hidden int64 *unit code*: the element's ordinal in the producer's stream
(``epoch * n + index in that epoch's order``) or, for an element re-emitted
on restore, ``-(1 + i)`` where ``i`` indexes the restore plan (the unit id
it stands for and which of its records to return). The producer stage hands
each take's codes to :meth:`ProducerPart.on_take`, which turns them into
unit ids and filters and notes them in the report of the batcher's
evaluation running in that thread (``feedq._resume.report``).

Orders are replayable: epoch ``e`` is ``default_rng([seed, e]).permutation(n)``
(``seed`` drawn once when the user gave none, and saved in the state).
"""

from __future__ import annotations

import secrets
import threading
import zlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from feedq._core.arrays import epoch_order
from feedq._resume import positions as layout
from feedq._resume import report as _report
from feedq._resume.filelist import FileList
from feedq.errors import InvalidArgumentError
from feedq.queues import QueueBase

if TYPE_CHECKING:
    from feedq.input._producers import _Epochs as Epochs

__all__: list[str] = []


class ProducerPart:
    """A resumable producer's orders, restore plan and hand-outs.

    Args:
        arr: the producer's elements (rows).
        kind: ``"string"``, ``"slice"`` or ``"input"`` (for fingerprints).
        shuffle, seed: as given to the producer.
        epochs: its epoch counter.
        single: each element is one record (slice/input producers), not a
            work unit a reader reads records from.
        fingerprint_extra: what else a restore must agree on (the arrays of
            a ``slice_input_producer``).
        shard: rank and world of a ``shard_files`` list (saved in the
            state, for ``reshard_states``).
    """

    def __init__(
        self,
        arr: np.ndarray[Any, Any],
        kind: str,
        *,
        shuffle: bool,
        seed: int | None,
        epochs: Epochs,
        single: bool,
        fingerprint_extra: dict[str, Any] | None = None,
        shard: dict[str, int] | None = None,
    ) -> None:
        self.arr = arr
        self.n = int(arr.shape[0])
        self.kind = kind
        self.shuffle = shuffle
        self.user_seed = seed
        self.seed = int(seed) if seed is not None else secrets.randbits(63)
        self.epochs = epochs
        self.single = single
        self._lock = threading.Lock()
        self._orders: dict[int, np.ndarray[Any, Any]] = {}  # guarded by self._lock
        # Restore plan: entry i re-emits unit _plan_units[i] (value
        # _plan_values[i]) with filter _plan_filters[i].
        self._plan_units: list[int] = []
        self._plan_values: list[Any] = []
        self._plan_filters: list[layout.UnitFilter | None] = []
        self._plan_emitted = False
        self._plan_taken = False  # every plan code was taken (see resolve)
        self._start = 0  # the ordinal the stream continues from
        self._filters: dict[int, layout.UnitFilter] = {}
        self._worklist: list[Any] = []  # values of work-list units (elastic)
        self.started = False
        self.fingerprint_extra = fingerprint_extra
        self.overflow = False  # more than WORKLIST_BASE units were emitted
        self._fingerprint: dict[str, Any] | None = None  # the inputs never change
        self._files: FileList | None = None  # guarded by self._lock (made once)
        self.shard = shard  # rank/world of a re-sharded state (elastic)

    # -- orders -------------------------------------------------------------------

    def order(self, epoch: int) -> np.ndarray[Any, Any]:
        """Element indices of epoch ``epoch``, in the order they are emitted."""
        if not self.shuffle:
            return np.arange(self.n)
        with self._lock:
            got = self._orders.get(epoch)
            if got is None:
                got = epoch_order(self.n, self.seed, epoch)
                self._orders = {epoch: got, **{k: v for k, v in self._orders.items() if k >= epoch - 1}}
            return got

    def value_of(self, unit: int) -> Any:
        """The element of unit ``unit`` (a stream ordinal or a work-list id)."""
        if unit >= layout.WORKLIST_BASE:
            return self._worklist[unit - layout.WORKLIST_BASE]
        epoch, pos = divmod(unit, self.n)
        return self.arr[int(self.order(epoch)[pos])]

    def files(self) -> FileList | None:
        """A file producer's list as states name it (None for other
        producers); made once, on first need (its runner's first epoch makes
        it, so that the first ``state_dict()`` does not pay for it)."""
        if self.kind != "string":
            return None
        with self._lock:
            if self._files is None:
                self._files = FileList(self.arr.tolist())
            return self._files

    def fingerprint(self) -> dict[str, Any]:
        """What a restore must agree on (the inputs by count and checksum)."""
        if self._fingerprint is None:
            self._fingerprint = self._compute_fingerprint()
        return dict(self._fingerprint)

    def _compute_fingerprint(self) -> dict[str, Any]:
        files = self.files()
        if files is not None:
            digest = files.crc32
        elif self.arr.dtype == object:
            digest = zlib.crc32(b"\0".join(bytes(v) for v in self.arr.tolist()))
        else:
            digest = zlib.crc32(np.ascontiguousarray(self.arr).view(np.uint8).reshape(-1)[: 1 << 24].tobytes())
        return {
            "producer": self.kind,
            "elements": self.n,
            "element_shape": list(self.arr.shape[1:]),
            "dtype": str(self.arr.dtype),
            "shuffle": self.shuffle,
            "seed": self.user_seed,
            "num_epochs": self.epochs.limit,
            "inputs_crc32": digest,
            "arrays": self.fingerprint_extra,
        }

    # -- the enqueue op -------------------------------------------------------------

    def enqueue_op(self, q: QueueBase) -> Callable[[], None]:
        """The producer's op: the restore plan once, then whole epochs from
        the saved position (IP2: one op per epoch)."""
        n = self.n

        def enqueue_epoch() -> None:
            if not self.started:
                self.fingerprint()  # made here, off the consumer's thread
            self.started = True
            if not self._plan_emitted:
                self._plan_emitted = True
                if self._plan_units:
                    values = _as_column(self._plan_values, self.arr)
                    codes = -np.arange(1, len(self._plan_units) + 1, dtype=np.int64)
                    q.enqueue_many([values, codes])
                    return
            epoch = self.epochs.next()
            if (epoch + 1) * n > layout.WORKLIST_BASE:
                self.overflow = True  # positions cannot name these units: state_dict() refuses
            start = self._start - epoch * n if epoch == self._start // n else 0
            order = self.order(epoch)[start:]
            codes = epoch * n + np.arange(start, n, dtype=np.int64)
            q.enqueue_many([self.arr[order], codes])

        return enqueue_epoch

    def on_take(self, codes: np.ndarray[Any, Any]) -> None:
        """A stage took elements with these unit codes: note their units
        (and re-read filters) in this thread's report."""
        units, filters = self.resolve(codes)
        _report.note_taken(self, units, filters)

    def resolve(self, codes: np.ndarray[Any, Any]) -> tuple[np.ndarray[Any, Any], dict[int, layout.UnitFilter]]:
        """Unit ids of taken codes, and the re-read filters of those that have one."""
        codes = np.asarray(codes, dtype=np.int64).reshape(-1)
        if self._plan_taken or not self._plan_units or not codes.shape[0]:
            return codes, {}
        if codes[-1] >= 0:
            # The plan is enqueued first, in one block: a stream code taken
            # means every plan code was taken, by now or before.
            self._plan_taken = True
        neg = codes < 0
        if not neg.any():
            return codes, {}
        units = codes.copy()
        filters: dict[int, layout.UnitFilter] = {}
        for i in np.flatnonzero(neg).tolist():
            entry = -int(codes[i]) - 1
            unit = self._plan_units[entry]
            units[i] = unit
            f = self._plan_filters[entry]
            if f is not None:
                filters[unit] = f
        return units, filters

    # -- restore --------------------------------------------------------------------

    def reseed(self, seed: int, worklist: list[Any]) -> None:
        """Take a saved state's shuffle seed and work list (the units it
        re-emits by id): the epoch orders are drawn again from ``seed``."""
        with self._lock:
            self.seed = int(seed)
            self._orders.clear()
            self._worklist = list(worklist)

    def set_plan(
        self,
        entries: list[tuple[int, Any, layout.UnitFilter | None]],
        start: int,
        worklist: list[Any],
    ) -> None:
        """Re-emit ``entries`` ``(unit, value, filter)`` first, then continue
        the stream at ordinal ``start``. Before the runner starts only.

        Raises:
            FailedPreconditionError: the producer already ran.
        """
        from feedq.errors import FailedPreconditionError

        if self.started:
            raise FailedPreconditionError("the producer already ran: restore before starting the pipeline")
        if start < 0:
            raise InvalidArgumentError(f"resume: bad stream position {start}")
        if self.epochs.limit is not None and start > self.epochs.limit * self.n:
            raise InvalidArgumentError(
                f"resume: the state is at element {start} of a producer of {self.n} elements "
                f"x {self.epochs.limit} epochs"
            )
        self._worklist = list(worklist)
        self._plan_units = [u for u, _, _ in entries]
        self._plan_values = [v for _, v, _ in entries]
        self._plan_filters = [f for _, _, f in entries]
        self._plan_emitted = False
        self._plan_taken = False
        self._start = start
        with self.epochs._lock:
            self.epochs.started = start // self.n


def _as_column(values: list[Any], like: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    if like.dtype == object:
        out = np.empty(len(values), dtype=object)
        out[:] = values
        return out
    return np.asarray(values, dtype=like.dtype).reshape((len(values), *like.shape[1:]))
