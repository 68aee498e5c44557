"""The queue engine: pending attempts, flush, waits and withdrawal.

How a call proceeds. Every enqueue or dequeue that cannot finish at once
becomes an *attempt* appended to one of two lines (producers, consumers).
Under the queue's one lock, ``_flush`` serves the head of each line as far as
the storage allows, on behalf of whichever thread holds the lock, and repeats
until nothing moves. This gives TF1's semantics directly:

* strict arrival order per line (Q14): only the head attempt progresses;
* ``enqueue_many`` is contiguous but not atomic (Q15/Q16): it inserts as
  space frees;
* ``dequeue_many`` collects incrementally (Q18), so ``n > capacity`` works
  (Q19), and what it holds is not counted by ``size()`` (Q12).

A caller whose attempt is not finished sleeps on its own wake-up
(``_cancel.Waiter``) until the flush finishes the attempt, its deadline
passes, its :class:`~feedq.queues.CancelToken` fires, or an asynchronous
exception (Ctrl-C) interrupts it. Every way of giving up goes through one
path, :meth:`QueueEngine._withdraw`: the attempt leaves its line; a dequeue
puts the elements it collected back at the front in their original order
(Q27, T3); an enqueue keeps the rows it inserted (Q15) and reports how many
in the error's ``num_enqueued``. ``close``/``cancel`` fail attempts through
the same path.

Storage is the only thing queue kinds change: ``_put``, ``_take``,
``_putback``, ``_available``, ``_grow`` (and ``_forget``, for kinds whose
``_take`` leaves object references behind) run with the lock held and see
columns (one NumPy buffer per component: ``(alloc,) + shape`` for dense
components, an object array of per-element arrays for ragged ones).

Copies outside the lock (reserve → copy → commit). A kind whose storage is a
ring (FIFOQueue, PaddingFIFOQueue) lets a large ``enqueue_many`` /
``dequeue_many`` that can finish at once copy its dense numeric columns with
the lock released: under the lock it *reserves* the ring slots after the
stored rows (``_in_busy``) or *claims* the oldest rows (``_out_busy``), copies,
then takes the lock again to *commit* (publish the rows, in order) or to free
the claimed slots. NumPy releases the GIL for large copies; without this, the
other thread would wake only to block on the queue's lock. A reservation is
the linearisation point of its call: it counts against the capacity at once,
its rows become visible at the commit, and nothing that arrives meanwhile
(close, cancel, a timeout of another call) undoes it. Rules that keep strict
arrival order (Q14, Q16) and exact accounting:

* at most one reservation is in flight; while it is, no other row is stored
  after it (producers wait in line, the flush serves none, and the queue
  stays CLOSING, not CLOSED, so that dequeues wait for its rows);
* claims leave the stored rows at once (``size`` counts them out, Q12); their
  slots are reused only once every older claim finished copying;
* an asynchronous exception (Ctrl-C) in the copy rolls back exactly: a
  reservation is released, a claim's rows go back to the front in order (T3).

Asynchronous exceptions (Ctrl-C, ``PyThreadState_SetAsyncExc``) arrive only
where the interpreter checks for them: a Python function's start, a loop's
back edge, the return of a call into C (such as a lock's release). So the
code that moves rows between the storage and a caller is straight-line
where it must be: a storage hook changes the storage only at its end, and
from its return until the rows are counted and the caller's (the attempt's
``chunks``, or the take path's local) nothing can be interrupted; the flush
finishes an attempt before it leaves its line, and skips finished heads; the
take path puts back whatever it took that did not reach its caller.

Close is a state machine (OPEN → CLOSING → CLOSED): CLOSING while enqueues
that were pending at ``close()`` may still finish, CLOSED once none is.
"""

from __future__ import annotations

import enum
import threading
import time
from collections import deque
from typing import Any, ClassVar, NamedTuple

import numpy as np

from feedq._core.accounts import current_account
from feedq._core.timeouts import resolve_timeout
from feedq.errors import CancelledError, DeadlineExceededError, OutOfRangeError
from feedq.queues._cancel import CancelToken, Waiter
from feedq.queues._spec import Component, ElementCodec

__all__ = ["BlockedCall", "QueueEngine", "QueueState", "TimingRecord"]

_INITIAL_ALLOC = 64


class QueueState(enum.Enum):
    """Life cycle of a queue."""

    OPEN = "open"
    #: close() was called; enqueues that were pending then may still finish.
    CLOSING = "closing"
    CLOSED = "closed"


# Module constants: an Enum member lookup costs ~0.1 us on the hot paths.
_OPEN = QueueState.OPEN
_CLOSING = QueueState.CLOSING
_CLOSED = QueueState.CLOSED


class TimingRecord(NamedTuple):
    """A queue's timing figures at one instant (``QueueEngine._timing``;
    read by :mod:`feedq._observe`). A tuple, so it also unpacks in this order."""

    size: int
    peak: int
    enqueued: int
    dequeued: int
    #: dequeue calls, and the sum of the sizes they found (for the mean fill)
    takes: int
    fill_sum: int
    #: calls that waited (finished waits only), and for how long in all
    enqueue_waits: int
    dequeue_waits: int
    enqueue_wait_s: float
    dequeue_wait_s: float


class BlockedCall(NamedTuple):
    """A call waiting in a queue's line now (``QueueEngine._blocked``)."""

    is_enqueue: bool
    #: its thread's ``threading.get_ident()``
    ident: int
    #: ``time.monotonic()`` when it started waiting
    since: float
    #: elements it still needs (to insert or to take)
    elements: int


class _Attempt(Waiter):
    """A call waiting in a line. ``finished`` and ``error`` are guarded by
    the queue's lock; ``queued`` says whether it is still in its line."""

    __slots__ = ("cancel", "error", "finished", "ident", "queued", "since")

    def __init__(self, cancel: CancelToken | None) -> None:
        super().__init__()
        self.cancel = cancel
        self.finished = False
        self.queued = False
        self.error: BaseException | None = None
        # Set when the caller starts waiting (stall reports name it):
        # its thread, and ``time.monotonic()`` then.
        self.ident = 0
        self.since = 0.0


class _Enqueue(_Attempt):
    """A pending enqueue: rows ``[done, n)`` of ``cols`` are still to insert."""

    __slots__ = ("cols", "done", "n")

    def __init__(self, cols: list[np.ndarray[Any, Any]], n: int, cancel: CancelToken | None = None) -> None:
        super().__init__(cancel)
        self.cols = cols
        self.n = n
        self.done = 0


class _Dequeue(_Attempt):
    """A pending dequeue of ``n`` elements (``up_to``: fewer once closed).

    Collected elements are either kept as chunks (lists of columns) or,
    with ``outs``, written straight into the caller's buffers.
    """

    __slots__ = ("chunks", "count", "n", "op", "outs", "some", "up_to")

    def __init__(
        self,
        n: int,
        up_to: bool,
        op: str,
        outs: list[np.ndarray[Any, Any]] | None,
        some: bool = False,
        cancel: CancelToken | None = None,
    ) -> None:
        super().__init__(cancel)
        self.n = n
        self.up_to = up_to
        # dequeue_available: finish as soon as at least one element is held.
        self.some = some
        self.op = op
        self.outs = outs
        self.chunks: list[list[np.ndarray[Any, Any]]] = []
        self.count = 0


def set_num_enqueued(exc: BaseException, count: int) -> None:
    """Record on an enqueue's error how many rows it inserted before it."""
    try:
        exc.num_enqueued = count  # type: ignore[attr-defined]
    except AttributeError:  # pragma: no cover - an exception type without a __dict__
        pass


class QueueEngine:
    """The lock-held state and machinery of a queue; :class:`QueueBase`
    adds the public API and the queue kinds add storage. Values are
    converted by the queue's codec (``_codec``, an :class:`ElementCodec`)."""

    _kind: ClassVar[str] = "Queue"
    _codec: ElementCodec

    #: PriorityQueue: a dequeue_many takes all n at once or nothing (Q42).
    _all_or_nothing: ClassVar[bool] = False
    #: Every stored element may be taken now (``_available() == _size``).
    _all_available: ClassVar[bool] = True

    _name: str
    _capacity: int
    _components: list[Component]
    _cols: list[np.ndarray[Any, Any]]
    _has_refs: bool
    #: How _read_row copies each component out (set by QueueBase).
    _row_kinds: list[int]

    def _init_engine(self) -> None:
        # Re-entrant so that Waiter.sleep can take it back robustly after an
        # asynchronous exception, and a caller may hold it around calls.
        self._mutex = threading.RLock()
        self._producers: deque[_Enqueue] = deque()  # guarded by self._mutex
        self._consumers: deque[_Dequeue] = deque()  # guarded by self._mutex
        self._state = QueueState.OPEN  # guarded by self._mutex
        self._cancel_cause: BaseException | None = None  # guarded by self._mutex
        self._cancelled = False  # guarded by self._mutex
        self._size = 0  # guarded by self._mutex
        self._peak = 0  # guarded by self._mutex
        self._enqueued = 0  # guarded by self._mutex
        self._dequeued = 0  # guarded by self._mutex
        self._alloc = 0  # guarded by self._mutex
        self._cols = []  # guarded by self._mutex
        # Rows reserved by an enqueue copying outside the lock, and rows
        # claimed by dequeues copying outside it (ring kinds only).
        self._in_busy = 0  # guarded by self._mutex
        self._out_busy = 0  # guarded by self._mutex
        # Timing (feedq._observe.statistics): dequeue calls, the sizes they found (for
        # the mean fill), and the calls that waited and for how long.
        self._takes = 0  # guarded by self._mutex
        self._fill_sum = 0  # guarded by self._mutex
        self._enq_waits = 0  # guarded by self._mutex
        self._deq_waits = 0  # guarded by self._mutex
        self._enq_wait_s = 0.0  # guarded by self._mutex
        self._deq_wait_s = 0.0  # guarded by self._mutex

    # -- timing (read by feedq._observe.statistics) ---------------------------------------------

    def _timing(self) -> TimingRecord:
        """A consistent snapshot for feedq's pipeline statistics; waits in
        progress are not counted (see :meth:`_blocked`)."""
        with self._mutex:
            return TimingRecord(
                self._size, self._peak, self._enqueued, self._dequeued, self._takes,
                self._fill_sum, self._enq_waits, self._deq_waits, self._enq_wait_s,
                self._deq_wait_s,
            )

    def _blocked(self) -> list[BlockedCall]:
        """The calls waiting now, oldest first per line (producers first)."""
        with self._mutex:
            out = [BlockedCall(True, a.ident, a.since, a.n - a.done) for a in self._producers if a.ident]
            out.extend(BlockedCall(False, a.ident, a.since, a.n - a.count) for a in self._consumers if a.ident)
            return out

    # -- blocking calls ------------------------------------------------------------

    def _run_enqueue(self, att: _Enqueue, timeout: float | None, op: str) -> None:
        """Queue ``att`` and wait until it finished or gave up; raise its error."""
        wait = resolve_timeout(timeout)
        with self._mutex:
            if self._state is not _OPEN:
                raise self._closed_enqueue_error()
            try:
                self._producers.append(att)
                att.queued = True
                self._flush()
                if not att.finished:
                    self._await(att, wait, op)
            except BaseException as exc:
                # An asynchronous exception (Ctrl-C) while waiting (the lock is
                # held: Waiter.sleep takes it back): withdraw.
                if not att.finished:
                    self._withdraw(att)
                    att.finished = True
                    self._flush()
                set_num_enqueued(exc, att.done)
                raise
        if att.error is not None:
            raise att.error

    def _run_dequeue(self, att: _Dequeue, timeout: float | None) -> None:
        """Queue ``att`` and wait until it finished or gave up; raise its error."""
        wait = resolve_timeout(timeout)
        with self._mutex:
            self._takes += 1
            self._fill_sum += self._size
            try:
                self._consumers.append(att)
                att.queued = True
                self._flush()
                if not att.finished:
                    self._await(att, wait, att.op)
            except BaseException:
                # An asynchronous exception (Ctrl-C) while waiting, also one
                # that arrives just after the attempt finished: the caller
                # never gets the elements, so they go back.
                self._withdraw(att)
                att.finished = True
                self._flush()
                raise
        if att.error is not None:
            raise att.error

    def _await(self, att: _Enqueue | _Dequeue, wait: float | None, op: str) -> None:
        """Sleep until ``att`` finishes; give up on its deadline or token (lock held)."""
        token = att.cancel
        unsubscribe = None if token is None else token.on_fire(att.wake)
        # Timing (one clock read each way): the queue's wait totals, the
        # calling runner thread's account (feedq._core.accounts), and who waits
        # since when (stall reports).
        output = isinstance(att, _Enqueue)
        account = current_account()
        att.ident = threading.get_ident()
        att.since = since = time.monotonic()
        if account is not None:
            account.begin_wait(output, since, self)  # the queue: named in stall reports
        try:
            deadline = None if wait is None else time.monotonic() + wait
            remaining: float | None = None
            while not att.finished:
                att.arm()  # before the checks: a wake from now on is not lost
                if token is not None and token.fired:
                    self._give_up(att, token.error())
                    return
                if deadline is not None:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        if isinstance(att, _Enqueue):
                            self._expire_enqueue(att, op, wait)
                        else:
                            self._expire_dequeue(att, wait)
                        return
                att.sleep(self._mutex, remaining)
        finally:
            if unsubscribe is not None:
                unsubscribe()
            waited = time.monotonic() - since
            if output:
                self._enq_waits += 1
                self._enq_wait_s += waited
            else:
                self._deq_waits += 1
                self._deq_wait_s += waited
            if account is not None:
                account.end_wait(waited)

    def _withdraw(self, att: _Enqueue | _Dequeue) -> None:
        """Undo an attempt that will not complete (lock held).

        The one undo path for timeouts, fired tokens, ``close``/``cancel`` and
        asynchronous exceptions: the attempt leaves its line; a dequeue puts
        what it collected back at the front in order (Q27, T3); an enqueue
        keeps the rows it inserted (Q15), counted in ``att.done``.
        """
        if att.queued or not att.finished:
            # (An unfinished attempt is in line also when a subclass's own
            # wait loop queued it without marking it.)
            line: deque[Any] = self._consumers if isinstance(att, _Dequeue) else self._producers
            try:
                line.remove(att)  # from the left: the head is found at once
            except ValueError:
                pass
            att.queued = False
        if isinstance(att, _Dequeue):
            self._give_back(att)

    def _give_up(self, att: _Enqueue | _Dequeue, error: BaseException) -> None:
        """Withdraw ``att`` and let its caller raise ``error`` (lock held)."""
        self._withdraw(att)
        if isinstance(att, _Enqueue):
            set_num_enqueued(error, att.done)
        att.error = error
        att.finished = True
        self._flush()

    def _expire_enqueue(self, att: _Enqueue, op: str, wait: float | None) -> None:
        """``att`` timed out (lock held); T2: rows already in stay (Q15)."""
        detail = f"; {att.done} of {att.n} elements were enqueued before it" if att.done else ""
        # The size in the message is the one before the line moves on.
        err = DeadlineExceededError(
            f"Timed out waiting for notification: {self._kind} '{self._name}' {op} "
            f"after {wait:g} s (queue full, size {self._size}){detail}"
        )
        self._give_up(att, err)

    def _expire_dequeue(self, att: _Dequeue, wait: float | None) -> None:
        """``att`` timed out (lock held); T3: what it held goes back, in order."""
        held = att.count
        self._withdraw(att)
        detail = f"; the {held} collected were put back" if held else ""
        self._give_up(att, DeadlineExceededError(
            f"Timed out waiting for notification: {self._kind} '{self._name}' {att.op} "
            f"after {wait:g} s (requested {att.n}, current size {self._size}){detail}"
        ))

    def _closed_enqueue_error(self) -> CancelledError:
        if self._cancelled:
            err = CancelledError(f"{self._kind} '{self._name}' was cancelled.")
            err.__cause__ = self._cancel_cause
        else:
            err = CancelledError(f"{self._kind} '{self._name}' is closed.")
        set_num_enqueued(err, 0)
        return err

    # -- copies outside the lock (ring kinds) ----------------------------------------

    def _run_reserved(self, res: Any) -> None:
        """Copy a reservation's rows in with the lock released, then commit
        them; an interrupted copy releases the reservation. The lock is
        taken with ``with`` (re-entrant: a caller already holding it keeps
        it); an exception before the commit ran still commits (or
        releases) it, so the ring never stays reserved."""
        copied = False
        try:
            self._copy_in(res)
            copied = True
            with self._mutex:
                self._commit_put(res, copied)
        except BaseException as exc:
            with self._mutex:
                if self._reserved(res):
                    self._commit_put(res, copied)
            set_num_enqueued(exc, res.n if copied else 0)
            raise

    def _run_claimed(self, claim: Any) -> list[np.ndarray[Any, Any]]:
        """Copy a claim's rows out with the lock released, then free their
        slots. Whatever interrupts it, the rows that do not reach the
        caller go back to the front in order."""
        chunk = None
        try:
            chunk = self._copy_out(claim)
            with self._mutex:
                self._finish_claim(claim, True)
            return chunk
        except BaseException:
            with self._mutex:
                if not self._claim_done(claim):
                    self._finish_claim(claim, False)  # rows back in front
                elif chunk is not None:
                    self._restore([chunk])
                    self._flush()
            raise

    # -- giving elements back ---------------------------------------------------------

    def _give_back(self, att: _Dequeue) -> None:
        """Put an attempt's elements back at the front, in order (Q27, T3)."""
        if att.count == 0:
            return
        if att.outs is not None:
            chunks = [[buf[: att.count].copy() for buf in att.outs]]
        else:
            chunks = att.chunks
        self._restore(chunks)
        att.chunks = []
        att.count = 0

    def _restore(self, chunks: list[list[np.ndarray[Any, Any]]]) -> None:
        """Store taken rows back at the front, in order, as if never dequeued
        (lock held; may exceed the capacity)."""
        for chunk in reversed(chunks):
            k = int(chunk[0].shape[0])
            if k == 0:
                continue
            self._ensure_alloc(self._size + k)
            self._putback(chunk)
            self._size += k
            self._dequeued -= k
        if self._size > self._peak:  # noqa: PLR1730 - cheaper than max() on the hot path
            self._peak = self._size

    # -- the flush (lock held) ---------------------------------------------------------

    def _free(self) -> int:
        """Rows the capacity allows in now (reserved rows count as stored)."""
        if self._capacity < 0:
            return 1 << 62
        return self._capacity - self._size - self._in_busy

    def _ended(self) -> bool:
        """No element can arrive any more: closed and no enqueue pending."""
        return self._state is _CLOSED

    @staticmethod
    def _finish(att: _Attempt) -> None:
        """Mark ``att`` finished and wake its caller. Waiter.wake inlined:
        once ``finished`` is set, no Python call's start (where an
        asynchronous exception could end the flush) comes before the wake."""
        att.finished = True
        gate = att._gate
        if gate is not None:
            try:
                gate.release()
            except RuntimeError:
                pass  # already woken

    def _flush(self) -> None:
        """Serve the heads of both lines until nothing moves (lock held)."""
        producers, consumers = self._producers, self._consumers
        progress = True
        while progress:
            progress = False
            if self._state is _CLOSING and not producers and not self._in_busy:
                self._state = QueueState.CLOSED
                progress = True
            # Producers, oldest first (Q14); none behind a reservation that
            # is being copied in, whose rows come first (Q16).
            while producers and not self._in_busy:
                att = producers[0]
                if att.finished:
                    # Finished but still in line: an asynchronous exception
                    # arrived between its finish and its leaving the line.
                    producers.popleft()
                    att.queued = False
                    progress = True
                    continue
                k = min(self._free(), att.n - att.done)
                if k > 0:
                    k = self._room_for(k)
                if k <= 0:
                    break
                self._put(att.cols, att.done, k)
                att.done += k
                self._size += k
                self._enqueued += k
                if self._size > self._peak:  # noqa: PLR1730 - cheaper than max() on the hot path
                    self._peak = self._size
                progress = True
                if att.done < att.n:
                    break
                # Finish before leaving the line: an exception in between
                # leaves a finished head, which the next flush removes.
                att.cols = []
                self._finish(att)
                producers.popleft()
                att.queued = False
            # Consumers, oldest first (Q14).
            taken = self._dequeued
            while consumers:
                datt = consumers[0]
                if datt.finished:  # see the producers' loop
                    consumers.popleft()
                    datt.queued = False
                    progress = True
                    continue
                need = datt.n - datt.count
                avail = self._available()
                if avail >= need:
                    self._collect(datt, need)
                elif datt.some and avail > 0:
                    self._collect(datt, avail)
                elif self._ended():
                    if datt.up_to and datt.count + avail > 0:
                        if avail:
                            self._collect(datt, avail)
                    else:
                        self._fail_dequeue(datt)  # takes it out of line
                        progress = True
                        continue
                elif (
                    self._all_or_nothing and datt.up_to and avail > 0
                    and self._state is _CLOSING and self._free() <= 0
                ):
                    # Closed, and the enqueues still pending wait for room
                    # that only this call can free but an all-or-nothing
                    # queue never frees partially: return what is there
                    # (Q28, Q43) instead of waiting forever.
                    self._collect(datt, avail)
                else:
                    if avail > 0 and not self._all_or_nothing:
                        self._collect(datt, avail)
                        progress = True
                    break
                self._finish(datt)
                consumers.popleft()
                datt.queued = False
                progress = True
            if producers and self._dequeued > taken:
                progress = True  # room was freed: the producers' head may go on

    def _collect(self, att: _Dequeue, k: int) -> None:
        # The hook changes the storage only at its end; from its return on,
        # nothing here can be interrupted until the rows are the attempt's.
        if att.outs is not None:
            self._take(k, att.outs, att.count)
            att.count += k
            self._size -= k
            self._dequeued += k
        else:
            chunk = self._take(k, None, 0)
            att.count += k
            self._size -= k
            self._dequeued += k
            att.chunks.append(chunk)
        if self._has_refs:
            self._forget(k)

    def _fail_dequeue(self, att: _Dequeue) -> None:
        """The queue ended with ``att`` unsatisfied (lock held)."""
        self._withdraw(att)
        if self._cancelled:
            err: BaseException = CancelledError(
                f"{self._kind} '{self._name}': Dequeue operation was cancelled"
            )
            err.__cause__ = self._cancel_cause
        else:
            err = OutOfRangeError(
                f"{self._kind} '{self._name}' is closed and has insufficient elements "
                f"(requested {att.n}, current size {self._size})"
            )
        att.error = err
        self._finish(att)

    def _cancel_producers(self, message: str) -> None:
        """Fail every pending enqueue; rows they inserted stay (Q24)."""
        while self._producers:
            att = self._producers[0]
            self._withdraw(att)
            err = CancelledError(f"{self._kind} '{self._name}': {message}")
            if self._cancelled:
                err.__cause__ = self._cancel_cause
            set_num_enqueued(err, att.done)
            att.error = err
            self._finish(att)

    # -- storage ------------------------------------------------------------------------

    def _ensure_alloc(self, needed: int) -> None:
        if needed <= self._alloc:
            return
        target = max(needed, 2 * self._alloc)
        if self._capacity >= 0:
            # Never beyond capacity unless a put-back needs it.
            target = max(needed, min(target, self._capacity))
        self._grow(target)

    def _room_for(self, k: int) -> int:
        """How many of ``k`` rows (``k <= _free()``) can be stored now,
        growing the storage if needed (lock held). Ring kinds return fewer
        while claimed slots are still being copied out."""
        self._ensure_alloc(self._size + k)
        return k

    def _initial_alloc(self) -> int:
        if self._capacity >= 0:
            return min(self._capacity, _INITIAL_ALLOC)
        return _INITIAL_ALLOC

    def _new_column(self, comp: Component, alloc: int) -> np.ndarray[Any, Any]:
        if comp.dense:
            assert comp.shape is not None
            return np.empty((alloc, *comp.shape), dtype=comp.dtype)
        return np.empty(alloc, dtype=object)

    # -- storage hooks (lock held) -------------------------------------------------------

    def _init_storage(self) -> None:
        """Set up kind-specific bookkeeping before the first ``_grow``."""

    def _grow(self, alloc: int) -> None:
        """Reallocate columns to ``alloc`` rows, keeping stored elements."""
        raise NotImplementedError

    def _available(self) -> int:
        """Elements a dequeue may take now."""
        raise NotImplementedError

    def _put(self, cols: list[np.ndarray[Any, Any]], start: int, k: int) -> None:
        """Store rows ``[start, start + k)`` of ``cols`` (room is guaranteed)."""
        raise NotImplementedError

    def _put_one(self, row: list[Any]) -> None:
        """Store one element given as converted component values."""
        self._put(self._codec.row_to_cols(row), 0, 1)

    def _take(self, k: int, outs: list[np.ndarray[Any, Any]] | None, offset: int) -> list[np.ndarray[Any, Any]]:
        """Remove ``k`` elements; write them to ``outs[i][offset:offset+k]``
        or return them as new columns."""
        raise NotImplementedError

    def _read_row(self, pos: int) -> list[Any]:
        """Copy row ``pos`` out of every column, clearing object references."""
        row = []
        for buf, kind in zip(self._cols, self._row_kinds):
            v = buf[pos]
            if kind == 1:
                v = v.copy()
            elif kind == 2:
                buf[pos] = None
            elif kind == 3:
                v = v.copy()
                buf[pos] = None
            row.append(v)
        return row

    def _forget(self, k: int) -> None:
        """Drop the object references the storage still holds to the ``k``
        elements just taken (kinds whose ``_take`` leaves them: ``_has_refs``)."""

    def _take_one(self) -> list[Any]:
        """Remove one element and return its component values."""
        chunk = self._take(1, None, 0)
        return [c[0] for c in chunk]

    def _putback(self, chunk: list[np.ndarray[Any, Any]]) -> None:
        """Return previously taken elements to the front (room is guaranteed)."""
        raise NotImplementedError

    # Ring kinds only (used when ``_copy_rows`` is set, see the module docstring).

    def _reserve(self, cols: list[np.ndarray[Any, Any]], n: int) -> Any:
        """Reserve room for rows ``[0, n)`` of ``cols`` after the stored rows
        (the caller checked that they may go in now and fit); store what is
        not copied outside the lock."""
        raise NotImplementedError

    def _copy_in(self, res: Any) -> None:
        """Copy a reservation's dense rows into its slots (lock not held)."""
        raise NotImplementedError

    def _reserved(self, res: Any) -> bool:
        """Whether ``res`` is still reserved (neither committed nor released)."""
        raise NotImplementedError

    def _claim_done(self, claim: Any) -> bool:
        """Whether :meth:`_finish_claim` ran for ``claim``."""
        raise NotImplementedError

    def _commit_put(self, res: Any, copied: bool) -> None:
        """Publish a reservation's rows, or release it if not ``copied``."""
        raise NotImplementedError

    def _claim(self, k: int, outs: list[np.ndarray[Any, Any]] | None, offset: int) -> Any:
        """Take the ``k`` oldest rows out of the count, keeping their slots
        busy until :meth:`_finish_claim`; take what is not copied outside."""
        raise NotImplementedError

    def _copy_out(self, claim: Any) -> list[np.ndarray[Any, Any]]:
        """Copy a claim's rows out (lock not held); one column per component."""
        raise NotImplementedError

    def _finish_claim(self, claim: Any, copied: bool) -> None:
        """Free a claim's slots, or put its rows back in front if not ``copied``."""
        raise NotImplementedError
