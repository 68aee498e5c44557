"""The queue engine: pending attempts, flush, waits and withdrawal.

How a call proceeds. Every enqueue or dequeue that cannot finish at once
becomes an *attempt* appended to one of two lines (producers, consumers).
Under the queue's one lock, ``flush`` serves the head of each line as far as
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
path, :meth:`QueueEngine.withdraw`: the attempt leaves its line; a dequeue
puts the elements it collected back at the front in their original order
(Q27, T3); an enqueue keeps the rows it inserted (Q15) and reports how many
in the error's ``num_enqueued``. ``close``/``cancel`` fail attempts through
the same path.

The engine is a part of a queue, not a base class of it: a
:class:`~feedq.queues.QueueBase` has one engine (this module's state and
machinery) and one codec (``_spec.ElementCodec``, values in and out), and
the queue kinds supply the storage. Storage is the only thing queue kinds
change: the engine reaches the rows only through the storage hooks of its
``store`` (the queue): ``_put``, ``_take``, ``_putback``, ``_available``,
``_room_for``, ``_grow`` (and ``_forget``, for kinds whose ``_take`` leaves
object references behind) run with the lock held and see columns (one NumPy buffer per component: ``(alloc,) + shape`` for dense
components, an object array of per-element arrays for ragged ones).

Copies outside the lock (reserve → copy → commit). A kind whose storage is a
ring (FIFOQueue, PaddingFIFOQueue) lets a large ``enqueue_many`` /
``dequeue_many`` that can finish at once copy its dense numeric columns with
the lock released: under the lock it *reserves* the ring slots after the
stored rows (``in_busy``) or *claims* the oldest rows (``out_busy``), copies,
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
from _thread import allocate_lock
from collections import deque
from typing import Any, NamedTuple

import numpy as np

from feedq._core.accounts import current_account
from feedq._core.timeouts import resolve_timeout
from feedq.errors import CancelledError, DeadlineExceededError, OutOfRangeError
from feedq.queues._cancel import CancelToken, Waiter

__all__ = ["BlockedCall", "QueueEngine", "QueueState", "TimingRecord"]


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

    # Its fields are set by the subclasses' __init__ (no chain of
    # super().__init__ calls: an attempt is built on every call that waits):
    # cancel, finished, queued, error, and, set when the caller starts
    # waiting (stall reports name it), its thread (ident) and
    # ``time.monotonic()`` then (since); Waiter's _gate.
    cancel: CancelToken | None
    finished: bool
    queued: bool
    error: BaseException | None
    ident: int
    since: float


class _Enqueue(_Attempt):
    """A pending enqueue: rows ``[done, n)`` of ``cols`` are still to insert."""

    __slots__ = ("cols", "done", "n")

    def __init__(self, cols: list[np.ndarray[Any, Any]], n: int, cancel: CancelToken | None = None) -> None:
        self._gate = None  # Waiter's (see _Attempt)
        self.cancel = cancel
        self.finished = False
        self.queued = False
        self.error = None
        self.ident = 0
        self.since = 0.0
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
        self._gate = None  # Waiter's (see _Attempt)
        self.cancel = cancel
        self.finished = False
        self.queued = False
        self.error = None
        self.ident = 0
        self.since = 0.0
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
    """The lock-held state and machinery of one queue: its lock, its two
    lines, its close state, its counters, and the flush, waits and
    withdrawals that serve the lines.

    A :class:`~feedq.queues.QueueBase` *has* one (``_engine``) and keeps
    the storage: the engine reaches the rows only through the storage hooks
    of its ``store`` (the queue), always with ``mutex`` held. The queue's
    fast paths read and update these attributes directly (no call); every
    other step goes through the methods here.
    """

    __slots__ = (
        "cancel_cause", "cancelled", "consumers", "deq_wait_s", "deq_waits", "dequeued",
        "enq_wait_s", "enq_waits", "enqueued", "fill_sum", "in_busy", "mutex", "out_busy",
        "peak", "producers", "size", "state", "store", "takes",
    )

    def __init__(self, store: Any) -> None:
        #: The queue whose storage hooks hold the rows (``_put``, ``_take``, ...).
        self.store = store
        # Re-entrant so that Waiter.sleep can take it back robustly after an
        # asynchronous exception, and a caller may hold it around calls.
        self.mutex = threading.RLock()
        # The two lines (never rebound: the queue keeps references to them).
        self.producers: deque[_Enqueue] = deque()  # guarded by self.mutex
        self.consumers: deque[_Dequeue] = deque()  # guarded by self.mutex
        self.state = _OPEN  # guarded by self.mutex
        self.cancel_cause: BaseException | None = None  # guarded by self.mutex
        self.cancelled = False  # guarded by self.mutex
        self.size = 0  # guarded by self.mutex
        self.peak = 0  # guarded by self.mutex
        self.enqueued = 0  # guarded by self.mutex
        self.dequeued = 0  # guarded by self.mutex
        # Rows reserved by an enqueue copying outside the lock, and rows
        # claimed by dequeues copying outside it (ring kinds only).
        self.in_busy = 0  # guarded by self.mutex
        self.out_busy = 0  # guarded by self.mutex
        # Timing (feedq._observe.statistics): dequeue calls, the sizes they found (for
        # the mean fill), and the calls that waited and for how long.
        self.takes = 0  # guarded by self.mutex
        self.fill_sum = 0  # guarded by self.mutex
        self.enq_waits = 0  # guarded by self.mutex
        self.deq_waits = 0  # guarded by self.mutex
        self.enq_wait_s = 0.0  # guarded by self.mutex
        self.deq_wait_s = 0.0  # guarded by self.mutex

    # -- timing (read by feedq._observe.statistics) ---------------------------------------------

    def timing(self) -> TimingRecord:
        """A consistent snapshot for feedq's pipeline statistics; waits in
        progress are not counted (see :meth:`blocked`)."""
        with self.mutex:
            return TimingRecord(
                self.size, self.peak, self.enqueued, self.dequeued, self.takes,
                self.fill_sum, self.enq_waits, self.deq_waits, self.enq_wait_s,
                self.deq_wait_s,
            )

    def blocked(self) -> list[BlockedCall]:
        """The calls waiting now, oldest first per line (producers first)."""
        with self.mutex:
            out = [BlockedCall(True, a.ident, a.since, a.n - a.done) for a in self.producers if a.ident]
            out.extend(BlockedCall(False, a.ident, a.since, a.n - a.count) for a in self.consumers if a.ident)
            return out

    def _label(self) -> str:
        store = self.store
        return f"{store._kind} '{store._name}'"

    # -- blocking calls ------------------------------------------------------------

    def run_enqueue(self, att: _Enqueue, timeout: float | None, op: str) -> None:
        """Queue ``att`` and wait until it finished or gave up; raise its error."""
        wait = resolve_timeout(timeout)
        with self.mutex:
            if self.state is not _OPEN:
                raise self.closed_enqueue_error()
            try:
                self.producers.append(att)
                att.queued = True
                self.flush()
                if not att.finished:
                    self._await(att, wait, op)
            except BaseException as exc:
                # An asynchronous exception (Ctrl-C) while waiting (the lock is
                # held: Waiter.sleep takes it back): withdraw.
                if not att.finished:
                    self.withdraw(att)
                    att.finished = True
                    self.flush()
                set_num_enqueued(exc, att.done)
                raise
        if att.error is not None:
            raise att.error

    def run_dequeue(self, att: _Dequeue, timeout: float | None) -> None:
        """Queue ``att`` and wait until it finished or gave up; raise its error."""
        wait = resolve_timeout(timeout)
        with self.mutex:
            self.wait_dequeue(att, wait, True)
        if att.error is not None:
            raise att.error

    def wait_dequeue(self, att: _Dequeue, wait: float | None, flush: bool) -> None:
        """Queue ``att`` and wait until it finished or gave up (the lock held
        once; ``wait`` resolved); the caller raises ``att.error``.

        ``flush=False`` for a take path that found, without releasing the
        lock since, no consumer in line, nothing available and the queue not
        closed: the flush could not serve ``att`` then (nothing to collect,
        nothing to fail it for), and the producers' line is as the last
        flush left it, so ``att`` waits at once.
        """
        self.takes += 1
        self.fill_sum += self.size
        try:
            self.consumers.append(att)
            att.queued = True
            if flush:
                self.flush()
            if not att.finished:
                self._await(att, wait, att.op)
        except BaseException:
            # An asynchronous exception (Ctrl-C) while waiting, also one
            # that arrives just after the attempt finished: the caller
            # never gets the elements, so they go back.
            self.withdraw(att)
            att.finished = True
            self.flush()
            raise

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
            account.begin_wait(output, since, self.store)  # the queue: named in stall reports
        try:
            deadline = None if wait is None else since + wait
            remaining: float | None = None
            while not att.finished:
                # Waiter.arm inlined: before the checks, so that a wake
                # from now on is not lost.
                gate = allocate_lock()
                gate.acquire()
                att._gate = gate
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
                att.sleep(self.mutex, remaining)
        finally:
            if unsubscribe is not None:
                unsubscribe()
            waited = time.monotonic() - since
            if output:
                self.enq_waits += 1
                self.enq_wait_s += waited
            else:
                self.deq_waits += 1
                self.deq_wait_s += waited
            if account is not None:
                account.end_wait(waited)

    def withdraw(self, att: _Enqueue | _Dequeue) -> None:
        """Undo an attempt that will not complete (lock held).

        The one undo path for timeouts, fired tokens, ``close``/``cancel`` and
        asynchronous exceptions: the attempt leaves its line; a dequeue puts
        what it collected back at the front in order (Q27, T3); an enqueue
        keeps the rows it inserted (Q15), counted in ``att.done``.
        """
        if att.queued or not att.finished:
            # (An unfinished attempt is in line also when a subclass's own
            # wait loop queued it without marking it.)
            line: deque[Any] = self.consumers if isinstance(att, _Dequeue) else self.producers
            try:
                line.remove(att)  # from the left: the head is found at once
            except ValueError:
                pass
            att.queued = False
        if isinstance(att, _Dequeue):
            self.give_back(att)

    def _give_up(self, att: _Enqueue | _Dequeue, error: BaseException) -> None:
        """Withdraw ``att`` and let its caller raise ``error`` (lock held)."""
        self.withdraw(att)
        if isinstance(att, _Enqueue):
            set_num_enqueued(error, att.done)
        att.error = error
        att.finished = True
        self.flush()

    def _expire_enqueue(self, att: _Enqueue, op: str, wait: float | None) -> None:
        """``att`` timed out (lock held); T2: rows already in stay (Q15)."""
        detail = f"; {att.done} of {att.n} elements were enqueued before it" if att.done else ""
        # The size in the message is the one before the line moves on.
        err = DeadlineExceededError(
            f"Timed out waiting for notification: {self._label()} {op} "
            f"after {wait:g} s (queue full, size {self.size}){detail}"
        )
        self._give_up(att, err)

    def _expire_dequeue(self, att: _Dequeue, wait: float | None) -> None:
        """``att`` timed out (lock held); T3: what it held goes back, in order."""
        held = att.count
        self.withdraw(att)
        detail = f"; the {held} collected were put back" if held else ""
        self._give_up(att, DeadlineExceededError(
            f"Timed out waiting for notification: {self._label()} {att.op} "
            f"after {wait:g} s (requested {att.n}, current size {self.size}){detail}"
        ))

    def closed_enqueue_error(self) -> CancelledError:
        """What an enqueue on a closed (or cancelled) queue raises."""
        if self.cancelled:
            err = CancelledError(f"{self._label()} was cancelled.")
            err.__cause__ = self.cancel_cause
        else:
            err = CancelledError(f"{self._label()} is closed.")
        set_num_enqueued(err, 0)
        return err

    # -- close / cancel ------------------------------------------------------------------

    def close(self, cancel_pending_enqueues: bool) -> None:
        """OPEN → CLOSING (CLOSED once no enqueue is pending); see QueueBase.close."""
        with self.mutex:
            if self.state is _OPEN:
                self.state = _CLOSING
            if cancel_pending_enqueues:
                self._cancel_producers("Enqueue operation was cancelled")
            self.flush()

    def cancel(self, cause: BaseException | None) -> None:
        """Close and fail every call that waits; see QueueBase.cancel."""
        with self.mutex:
            if self.state is _CLOSED and cause is None and not self.cancelled:
                # Already closed and nothing pending: a clean cancel changes
                # nothing, and end of data stays OutOfRange.
                return
            if not self.cancelled:
                self.cancelled = True
                self.cancel_cause = cause
            if self.state is _OPEN:
                self.state = _CLOSING
            self._cancel_producers("Enqueue operation was cancelled")
            self.flush()

    # -- copies outside the lock (ring kinds) ----------------------------------------

    def run_reserved(self, res: Any) -> None:
        """Copy a reservation's rows in with the lock released, then commit
        them; an interrupted copy releases the reservation. The lock is
        taken with ``with`` (re-entrant: a caller already holding it keeps
        it); an exception before the commit ran still commits (or
        releases) it, so the ring never stays reserved."""
        store = self.store
        copied = False
        try:
            store._copy_in(res)
            copied = True
            with self.mutex:
                store._commit_put(res, copied)
        except BaseException as exc:
            with self.mutex:
                if store._reserved(res):
                    store._commit_put(res, copied)
            set_num_enqueued(exc, res.n if copied else 0)
            raise

    def run_claimed(self, claim: Any) -> list[np.ndarray[Any, Any]]:
        """Copy a claim's rows out with the lock released, then free their
        slots. Whatever interrupts it, the rows that do not reach the
        caller go back to the front in order."""
        store = self.store
        chunk: list[np.ndarray[Any, Any]] | None = None
        try:
            chunk = store._copy_out(claim)
            with self.mutex:
                store._finish_claim(claim, True)
            return chunk
        except BaseException:
            with self.mutex:
                if not store._claim_done(claim):
                    store._finish_claim(claim, False)  # rows back in front
                elif chunk is not None:
                    self.restore([chunk])
                    self.flush()
            raise

    # -- giving elements back ---------------------------------------------------------

    def give_back(self, att: _Dequeue) -> None:
        """Put an attempt's elements back at the front, in order (Q27, T3)."""
        if att.count == 0:
            return
        if att.outs is not None:
            chunks = [[buf[: att.count].copy() for buf in att.outs]]
        else:
            chunks = att.chunks
        self.restore(chunks)
        att.chunks = []
        att.count = 0

    def restore(self, chunks: list[list[np.ndarray[Any, Any]]]) -> None:
        """Store taken rows back at the front, in order, as if never dequeued
        (lock held; may exceed the capacity)."""
        store = self.store
        for chunk in reversed(chunks):
            k = int(chunk[0].shape[0])
            if k == 0:
                continue
            store._ensure_alloc(self.size + k)
            store._putback(chunk)
            self.size += k
            self.dequeued -= k
        if self.size > self.peak:  # noqa: PLR1730 - cheaper than max() on the hot path
            self.peak = self.size

    # -- the flush (lock held) ---------------------------------------------------------

    def _free(self) -> int:
        """Rows the capacity allows in now (reserved rows count as stored)."""
        capacity = self.store._capacity
        if capacity < 0:
            return 1 << 62
        return int(capacity - self.size - self.in_busy)

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

    def flush(self) -> None:
        """Serve the heads of both lines until nothing moves (lock held).

        One pass serves the producers, then the consumers, each line as far
        as it goes; the consumers' loop sees what the producers inserted in
        the same pass. Another pass is needed only when the consumers freed
        room that a waiting producer may use, or when the last pending
        enqueue left a closing queue (it becomes CLOSED, and the consumers
        then see that no element can arrive any more): a flush that only
        finished a consumer (every notify of a waiting dequeue) makes one.
        """
        store = self.store
        producers, consumers = self.producers, self.consumers
        all_or_nothing = store._all_or_nothing
        while True:
            if self.state is _CLOSING and not producers and not self.in_busy:
                self.state = _CLOSED
            # Producers, oldest first (Q14); none behind a reservation that
            # is being copied in, whose rows come first (Q16).
            while producers and not self.in_busy:
                att = producers[0]
                if att.finished:
                    # Finished but still in line: an asynchronous exception
                    # arrived between its finish and its leaving the line.
                    producers.popleft()
                    att.queued = False
                    continue
                k = min(self._free(), att.n - att.done)
                if k > 0:
                    k = store._room_for(k)
                if k <= 0:
                    break
                store._put(att.cols, att.done, k)
                att.done += k
                self.size += k
                self.enqueued += k
                if self.size > self.peak:  # noqa: PLR1730 - cheaper than max() on the hot path
                    self.peak = self.size
                if att.done < att.n:
                    break
                # Finish before leaving the line: an exception in between
                # leaves a finished head, which the next flush removes.
                att.cols = []
                self._finish(att)
                producers.popleft()
                att.queued = False
            # Consumers, oldest first (Q14).
            taken = self.dequeued
            while consumers:
                datt = consumers[0]
                if datt.finished:  # see the producers' loop
                    consumers.popleft()
                    datt.queued = False
                    continue
                need = datt.n - datt.count
                avail = store._available()
                if avail >= need:
                    self._collect(datt, need)
                elif datt.some and avail > 0:
                    self._collect(datt, avail)
                elif self.state is _CLOSED:  # no element can arrive any more
                    if datt.up_to and datt.count + avail > 0:
                        if avail:
                            self._collect(datt, avail)
                    else:
                        self._fail_dequeue(datt)  # takes it out of line
                        continue
                elif (
                    all_or_nothing and datt.up_to and avail > 0
                    and self.state is _CLOSING and self._free() <= 0
                ):
                    # Closed, and the enqueues still pending wait for room
                    # that only this call can free but an all-or-nothing
                    # queue never frees partially: return what is there
                    # (Q28, Q43) instead of waiting forever.
                    self._collect(datt, avail)
                else:
                    if avail > 0 and not all_or_nothing:
                        self._collect(datt, avail)
                    break
                self._finish(datt)
                consumers.popleft()
                datt.queued = False
            if producers and self.dequeued > taken:
                continue  # room was freed: the producers' head may go on
            if self.state is _CLOSING and not producers and not self.in_busy:
                continue  # the queue is CLOSED now: the consumers' head may fail
            return

    def _collect(self, att: _Dequeue, k: int) -> None:
        # The hook changes the storage only at its end; from its return on,
        # nothing here can be interrupted until the rows are the attempt's.
        store = self.store
        if att.outs is not None:
            store._take(k, att.outs, att.count)
            att.count += k
            self.size -= k
            self.dequeued += k
        else:
            chunk = store._take(k, None, 0)
            att.count += k
            self.size -= k
            self.dequeued += k
            att.chunks.append(chunk)
        if store._has_refs:
            store._forget(k)

    def _fail_dequeue(self, att: _Dequeue) -> None:
        """The queue ended with ``att`` unsatisfied (lock held)."""
        self.withdraw(att)
        if self.cancelled:
            err: BaseException = CancelledError(f"{self._label()}: Dequeue operation was cancelled")
            err.__cause__ = self.cancel_cause
        else:
            err = OutOfRangeError(
                f"{self._label()} is closed and has insufficient elements "
                f"(requested {att.n}, current size {self.size})"
            )
        att.error = err
        self._finish(att)

    def _cancel_producers(self, message: str) -> None:
        """Fail every pending enqueue; rows they inserted stay (Q24)."""
        while self.producers:
            att = self.producers[0]
            self.withdraw(att)
            err = CancelledError(f"{self._label()}: {message}")
            if self.cancelled:
                err.__cause__ = self.cancel_cause
            set_num_enqueued(err, att.done)
            att.error = err
            self._finish(att)
