"""FIFOQueue: columnar ring buffers, and the copies of large batches made
outside the lock (reservations and claims). Its storage hooks are the
model the other kinds follow (see :mod:`feedq.queues._engine`)."""

from __future__ import annotations

import itertools
from collections import deque
from typing import Any

import numpy as np

from feedq.queues._engine import QueueState
from feedq.queues._queue import QueueBase
from feedq.queues._refs import clear_ring
from feedq.queues._spec import STRING

__all__ = ["FIFOQueue", "OwnedColumns"]


class OwnedColumns(list):  # type: ignore[type-arg]
    """Columns (one array per component) that nobody else holds or will
    touch: a FIFOQueue keeps them as a block without copying them, and may
    hand them out again as a dequeue's result. Internal: for a caller that
    built the arrays itself, passed to the put path
    (``QueueBase._put_path``) as its columns."""

    __slots__ = ()


#: A batch of at least this many rows that arrives while no row is stored
#: in the ring is kept as a block (see FIFOQueue, "Blocks by reference").
_BLOCK_MIN_ROWS = 16  # (FIFOQueue._block_min_rows)

# Module constants: an Enum member lookup costs ~0.1 us on the hot paths.
_OPEN = QueueState.OPEN
_CLOSING = QueueState.CLOSING
_CLOSED = QueueState.CLOSED


class FIFOQueue(QueueBase):
    """A first-in first-out queue (spec Q1–Q28, T1–T4).

    Fixed-shape components live in preallocated columnar ring buffers, so
    ``enqueue_many`` / ``dequeue_many`` are at most two slice copies per
    component. Storage grows by doubling up to ``capacity`` (or without
    bound when ``capacity < 0``, Q5). A batch of at least 1 MiB of dense
    numeric data that can go in (or out) at once is copied with the lock
    released (reserve → copy → commit, see :mod:`feedq.queues._engine`).
    Every call goes through QueueBase's one put path and one take path;
    this class only provides the storage hooks
    (``tests/queues/test_fifo_hooks.py`` compares them with the simplest
    hooks there are).

    Blocks by reference (issue 22). A queue of dense numeric components
    keeps a batch of ``_block_min_rows`` (16) or more rows that arrives while
    the ring holds no row (and no copy is in flight) as a *block*: its
    columns, copied once (or not at all, for :class:`OwnedColumns`), in a
    line of blocks after the ring's rows; later batches join the line. A
    dequeue takes from the line's front: one whole block is handed out as
    it is, a part of a block as a view of it (the rows handed out are the
    caller's alone), and only a batch that crosses a block edge is copied.
    A batch of 1 MiB or more is copied into its block with the lock
    released (the reservation holds no ring slot), and a dequeue that large
    takes its rows from the line at its claim. A call that needs the ring
    (one element in, a put-back) first copies the line into the ring, in
    order. While the line is not empty the ring holds no row, so the order
    is the line's.

    Example::

        q = FIFOQueue(100, [np.float32, np.int64], shapes=[[32], []])
        q.enqueue_many([np.zeros((8, 32), np.float32), np.arange(8)])
        x, y = q.dequeue_many(4)        # x.shape == (4, 32)
        q.close()

    Args:
        capacity: maximum number of stored elements; negative = unbounded.
        dtypes: one dtype or a list, one per component (Q1).
        shapes: one fully defined shape per component, or None (Q2, Q6).
        names: component names; elements are then dicts (Q3).
        shared_name: queues built with the same shared_name in one process
            are the same queue; a mismatched re-open is an
            InvalidArgumentError (Q7).
        name: used in messages; a unique default otherwise.
    """

    _kind = "FIFOQueue"
    _default_name = "fifo_queue"
    _unlocked_copy_bytes = 1 << 20
    _block_min_rows = _BLOCK_MIN_ROWS
    _head: int  # guarded by self._mutex: ring index of the oldest stored element

    def __init__(
        self,
        capacity: int,
        dtypes: Any,
        shapes: Any = None,
        names: Any = None,
        shared_name: str | None = None,
        name: str | None = None,
    ) -> None:
        super().__init__(capacity, dtypes, shapes, names, shared_name, name)

    # -- storage -------------------------------------------------------------------------

    def _init_storage(self) -> None:
        # guarded by self._mutex
        self._head = 0
        # The enqueue copying its rows in outside the lock, and the dequeues
        # copying theirs out, oldest first (see feedq.queues._engine).
        self._resv: _Reservation | None = None
        self._claims: deque[_Claim] = deque()
        # One component whose row indexing gives a view (numeric, or an
        # object row): _take_one copies it.
        self._row_copy = self._one_comp and self._row_kinds[0] & 1 == 1
        self._dense_idx = [i for i, c in enumerate(self._components) if c.dense and c.dtype is not STRING]
        self._obj_idx = [i for i, c in enumerate(self._components) if not (c.dense and c.dtype is not STRING)]
        self._has_refs = bool(self._obj_idx)
        # The line of blocks (see the class docstring), and its rows.
        self._blocks_ok = not self._obj_idx and not self._partial_shapes
        self._blocks: deque[list[np.ndarray[Any, Any]]] = deque()
        self._bn = 0

    def _grow(self, alloc: int) -> None:
        # Also a fresh layout at the same size: the stored rows and the slots
        # of a reservation in flight move to the front of new columns; slots
        # still being copied out stay with the old columns, which the claims
        # keep (they are no longer counted busy here).
        new = [self._new_column(c, alloc) for c in self._components]
        live = self._engine.size - self._bn + self._engine.in_busy
        if live:
            for dst, src in zip(new, self._cols):
                self._ring_read(src, self._head, live, dst)
        if self._blocks:  # the line of blocks follows the ring's rows, in order
            pos = live
            for block in self._blocks:
                m = block[0].shape[0]
                for dst, src in zip(new, block):
                    dst[pos : pos + m] = src
                pos += m
            empty: deque[list[np.ndarray[Any, Any]]] = deque()
            self._bn = 0  # no call between these two
            self._blocks = empty
        if self._resv is not None:
            self._resv.pos = self._engine.size  # its commit copies the rows again
        for claim in self._claims:
            claim.stale = True
        self._claims.clear()
        self._engine.out_busy = 0
        self._cols = new
        self._alloc = alloc
        self._head = 0

    def _ensure_alloc(self, needed: int) -> None:
        super()._ensure_alloc(needed + self._engine.in_busy)

    def _as_block(self, k: int) -> bool:
        """Whether a put of ``k`` rows now joins the line of blocks (lock held)."""
        if self._blocks:
            return True
        engine = self._engine
        return (
            self._blocks_ok and engine.size == 0 and not engine.in_busy and not engine.out_busy
            and k >= self._block_min_rows
        )

    def _blocks_next(self) -> bool:
        return self._blocks_ok and (self._bn > 0 or self._engine.size == 0)

    def _materialize(self, extra: int) -> None:
        """Copy the line of blocks into the ring, in order, with room for
        ``extra`` more rows (lock held; the ring holds no row meanwhile)."""
        if not self._blocks:
            return
        engine = self._engine
        need = engine.size + engine.in_busy + extra
        if need > self._alloc:
            self._ensure_alloc(need - engine.in_busy)  # a fresh layout: _grow copies the line
        if self._blocks and engine.out_busy:
            # Slots before the head are still being copied out (a claim
            # older than the line): lay out afresh rather than write over them.
            self._grow(self._alloc)
        if not self._blocks:
            return
        pos = self._head
        for block in self._blocks:
            m = block[0].shape[0]
            self._write(pos, block, 0, m)
            pos += m
            if pos >= self._alloc:
                pos -= self._alloc
        # The rows are in the ring now; the line leaves at the end, with no
        # call between these two statements (an interruption before them
        # leaves the line as it was, and the ring's copies uncounted).
        empty: deque[list[np.ndarray[Any, Any]]] = deque()
        self._bn = 0
        self._blocks = empty

    def _room_for(self, k: int) -> int:
        if self._as_block(k):
            return k  # a block needs no ring slot
        engine = self._engine
        room = self._alloc - engine.size - engine.in_busy - engine.out_busy
        if room >= k:
            return k
        if engine.size + engine.in_busy + k > self._alloc and (self._capacity < 0 or self._alloc < self._capacity):
            self._ensure_alloc(engine.size + k)  # a fresh layout: no slot busy
            return min(k, self._alloc - engine.size - engine.in_busy)
        return max(room, 0)  # the rest once the claimed slots are free

    def _ring_read(self, buf: np.ndarray[Any, Any], start: int, k: int, dst: np.ndarray[Any, Any]) -> None:
        """``dst[:k] = `` ``k`` rows of ``buf`` from ring index ``start``."""
        first = min(k, self._alloc - start)
        dst[:first] = buf[start : start + first]
        if k > first:
            dst[first:k] = buf[: k - first]

    @staticmethod
    def _ring_write(buf: np.ndarray[Any, Any], alloc: int, pos: int, src: np.ndarray[Any, Any]) -> None:
        """Write the rows of ``src`` into ``buf`` (a ring of ``alloc`` slots) from ``pos``."""
        k = src.shape[0]
        if pos + k <= alloc:
            buf[pos : pos + k] = src
        else:
            first = alloc - pos
            buf[pos:] = src[:first]
            buf[: k - first] = src[first:]

    def _write(self, pos: int, cols: list[np.ndarray[Any, Any]], start: int, k: int) -> None:
        if pos + k <= self._alloc:
            for buf, src in zip(self._cols, cols):
                buf[pos : pos + k] = src[start : start + k]
            return
        first = self._alloc - pos
        for buf, src in zip(self._cols, cols):
            buf[pos : pos + first] = src[start : start + first]
            if k > first:
                buf[: k - first] = src[start + first : start + k]

    def _enqueue_owned(self, cols: list[np.ndarray[Any, Any]]) -> None:
        """``enqueue_many(cols)`` (blocking) for columns of this queue's exact
        spec that nobody else holds or will touch: kept as a block without a
        copy where a batch would be (see "Blocks by reference"), and handed
        out as a dequeue's result. For feedq's shuffle buffer, whose draws are
        new arrays."""
        if cols and len(cols[0]):
            self._put_path(OwnedColumns(cols), len(cols[0]), None, None, False)

    def _available(self) -> int:
        return self._engine.size

    def _put(self, cols: list[np.ndarray[Any, Any]], start: int, k: int) -> None:
        if self._blocks or (self._blocks_ok and k >= self._block_min_rows and self._as_block(k)):
            # By reference: the caller's columns are copied once (a dequeue
            # hands the copy out), handed-over ones not at all.
            whole = start == 0 and cols[0].shape[0] == k
            if type(cols) is OwnedColumns:
                block = cols if whole else [c[start : start + k] for c in cols]
            elif self._one_comp:
                block = [cols[0].copy() if whole else cols[0][start : start + k].copy()]
            else:
                block = [c[start : start + k].copy() for c in cols]
            # No call from here to the return (``+=`` on a deque is no call).
            self._bn += k
            self._blocks += (block,)
            return
        alloc = self._alloc
        pos = self._head + self._engine.size
        if pos >= alloc:
            pos -= alloc
        end = pos + k
        if end <= alloc and start == 0 and len(cols[0]) == k:
            # A whole batch into one segment: the common case.
            if self._one_comp:
                self._cols[0][pos:end] = cols[0]
                return
            for buf, src in zip(self._cols, cols):
                buf[pos:end] = src
            return
        self._write(pos, cols, start, k)

    def _keep_busy(self, k: int) -> None:
        """Rows taken under the lock while older claims are still copying
        out: their slots stay busy until those finish, so that the busy
        slots remain one run just before the head."""
        done = _Claim(self._head, k, [], None, 0)
        done.done = True
        self._claims.append(done)
        self._engine.out_busy += k

    def _take(self, k: int, outs: list[np.ndarray[Any, Any]] | None, offset: int) -> list[np.ndarray[Any, Any]]:
        # Copies first, then the head moves, then the return: no point where
        # an asynchronous exception can arrive lies between the storage
        # changing and the caller holding the rows. Object references in
        # the slots are dropped afterwards by _forget (called by the take
        # path once the rows are the caller's).
        blocks = self._blocks
        if blocks:
            first = blocks[0]
            if outs is None and first[0].shape[0] == k:  # one whole block: handed out as it is
                self._bn -= k
                del blocks[0]
                return first
            return self._take_blocks(k, outs, offset)
        if self._claims:
            self._keep_busy(k)
        head, alloc = self._head, self._alloc
        end = head + k
        if outs is None:
            if end <= alloc:  # one contiguous segment: the common case
                if self._one_comp:
                    result = [self._cols[0][head:end].copy()]
                    self._head = end if end < alloc else 0
                    return result
                result = []
                for buf in self._cols:
                    result.append(buf[head:end].copy())
                self._head = end if end < alloc else 0
                return result
            end -= alloc
            result = []
            for buf in self._cols:
                result.append(np.concatenate((buf[head:], buf[:end])))
            self._head = end
            return result
        for i, buf in enumerate(self._cols):
            self._ring_read(buf, head, k, outs[i][offset : offset + k])
        self._head = end if end < alloc else end - alloc
        return []

    def _take_blocks(
        self, k: int, outs: list[np.ndarray[Any, Any]] | None, offset: int,
    ) -> list[np.ndarray[Any, Any]]:
        """``_take`` from the line of blocks (the ring holds no row). The
        line changes only in the last statements (no call after them)."""
        blocks = self._blocks
        first = blocks[0]
        m = first[0].shape[0]
        if outs is None and k <= m:
            if k == m:  # one whole block: handed out as it is
                self._bn -= k
                del blocks[0]
                return first
            result = [c[:k] for c in first]  # a view: these rows are the caller's alone
            rest = [c[k:] for c in first]
            self._bn -= k
            blocks[0] = rest
            return result
        # The batch crosses a block edge (or goes to the caller's buffers): copy.
        if outs is None:
            dsts = [np.empty((k, *c.shape[1:]), c.dtype) for c in first]
            off = 0
        else:
            dsts, off = outs, offset
        got = used = 0
        while got < k:
            block = blocks[used]
            m = min(block[0].shape[0], k - got)
            for dst, src in zip(dsts, block):
                dst[off + got : off + got + m] = src[:m]
            got += m
            used += 1
        left = deque(itertools.islice(blocks, used, None))
        last = blocks[used - 1]
        if m < last[0].shape[0]:
            left.appendleft([c[m:] for c in last])
        self._bn -= k
        self._blocks = left
        return [] if outs is not None else dsts

    def _forget(self, k: int) -> None:
        # The k slots before the head were just handed out.
        start = self._head - k
        if start < 0:
            start += self._alloc
        for i in self._obj_idx:
            clear_ring(self._cols[i], self._alloc, start, k)

    def _putback(self, chunk: list[np.ndarray[Any, Any]]) -> None:
        k = chunk[0].shape[0]
        self._materialize(k)
        engine = self._engine
        if engine.out_busy or self._alloc - engine.size - engine.in_busy < k:
            # The slots in front are still being copied out: lay out afresh.
            self._grow(max(self._alloc, engine.size + engine.in_busy + k))
        self._head = (self._head - k) % self._alloc
        self._write(self._head, chunk, 0, k)

    def _put_one(self, value: Any) -> None:
        if self._blocks:
            self._materialize(1)
        pos = self._head + self._engine.size
        if pos >= self._alloc:
            pos -= self._alloc
        if self._one_comp:
            self._cols[0][pos] = value
            return
        for buf, v in zip(self._cols, value):
            buf[pos] = v

    def _take_one(self) -> Any:
        if self._blocks:
            return self._take_one_block()
        if self._claims:
            self._keep_busy(1)
        pos = self._head
        if self._one_comp:
            # Index (a scalar, or a reference) or copy the row (a view of
            # the ring until copied).
            v = self._cols[0][pos]
            if self._row_copy:
                v = v.copy()
            self._head = pos + 1 if pos + 1 < self._alloc else 0
            return v
        row = [buf[pos].copy() if kind & 1 else buf[pos] for buf, kind in zip(self._cols, self._row_kinds)]
        self._head = pos + 1 if pos + 1 < self._alloc else 0
        return row

    def _take_one_block(self) -> Any:
        """``_take_one`` from the line of blocks (the ring holds no row)."""
        blocks = self._blocks
        first = blocks[0]
        if self._one_comp:
            v = first[0][0]
            if self._row_copy:
                v = v.copy()
        else:
            v = [c[0].copy() if kind & 1 else c[0] for c, kind in zip(first, self._row_kinds)]
        if first[0].shape[0] == 1:
            self._bn -= 1
            del blocks[0]
            return v
        rest = [c[1:] for c in first]
        self._bn -= 1
        blocks[0] = rest
        return v

    # -- copies outside the lock (reserve -> copy -> commit) -------------------------

    def _reserve(self, cols: list[np.ndarray[Any, Any]], n: int) -> _Reservation:
        if self._as_block(n):
            # A block: copied outside the lock into arrays of its own, which
            # join the line at the commit (no ring slot is written).
            res = _Reservation(-1, n, cols, [])
            res.as_block = True
            self._engine.in_busy = n
            self._resv = res
            return res
        pos = self._head + self._engine.size
        if pos >= self._alloc:
            pos -= self._alloc
        res = _Reservation(pos, n, cols, self._cols)
        for i in self._obj_idx:  # object columns: under the lock
            self._ring_write(self._cols[i], self._alloc, pos, cols[i][:n])
        self._engine.in_busy = n
        self._resv = res
        return res

    def _copy_in(self, res: _Reservation) -> None:
        if res.as_block:
            if type(res.src) is OwnedColumns and res.src[0].shape[0] == res.n:
                res.dst = list(res.src)  # handed over: kept as they are
            else:
                res.dst = [src[: res.n].copy() for src in res.src]
            return
        alloc = res.dst[0].shape[0]
        for i in self._dense_idx:
            src = res.src[i]
            self._ring_write(res.dst[i], alloc, res.dst_pos, src if src.shape[0] == res.n else src[: res.n])

    def _reserved(self, res: Any) -> bool:
        return self._resv is res

    def _claim_done(self, claim: Any) -> bool:
        return bool(claim.done)

    def _commit_put(self, res: _Reservation, copied: bool) -> None:
        n = res.n
        engine = self._engine
        block = None
        if res.as_block:
            if copied and engine.size - self._bn:
                # The ring holds rows now (a put-back came meanwhile): the
                # block goes into the ring after them (the room is reserved).
                pos = self._head + engine.size
                if pos >= self._alloc:
                    pos -= self._alloc
                self._write(pos, res.dst, 0, n)
            elif copied:
                block = res.dst
        elif copied and res.dst is not self._cols:
            # The storage was laid out afresh meanwhile (a put-back that
            # needed the front): copy the rows again where they are now.
            for i in self._dense_idx:
                self._ring_write(self._cols[i], self._alloc, res.pos, res.src[i][:n])
        if not copied and not res.as_block:
            for i in self._obj_idx:  # drop the references stored at reserve time
                clear_ring(self._cols[i], self._alloc, res.pos, n)
        # Straight-line (no call) from here to the flush: published or released.
        self._resv = None
        engine.in_busy = 0
        if block is not None:
            self._bn += n
            self._blocks += (block,)
        if copied:
            engine.size = size = engine.size + n
            engine.enqueued += n
            if size > engine.peak:  # noqa: PLR1730 - cheaper than max() on the hot path
                engine.peak = size
        res.src = []
        if self._consumers or self._producers or engine.state is _CLOSING:
            engine.flush()

    def _claim(self, k: int, outs: list[np.ndarray[Any, Any]] | None, offset: int) -> _Claim:
        if self._blocks:
            # From the line, under the lock: a whole block (or a part of
            # one) without a copy; across a block edge, copied here.
            claim = _Claim(-1, k, [], outs, offset)
            views = None if outs is None else [buf[offset : offset + k] for buf in outs]
            engine = self._engine
            chunk = self._take_blocks(k, outs, offset)
            # No call from here to the return.
            claim.rows = chunk if views is None else views
            engine.size -= k
            engine.dequeued += k
            return claim
        head, alloc = self._head, self._alloc
        claim = _Claim(head, k, self._cols, outs, offset)
        objs: dict[int, np.ndarray[Any, Any]] = {}
        for i in self._obj_idx:  # object columns: under the lock, and cleared
            buf = self._cols[i]
            col = np.empty((k, *buf.shape[1:]), dtype=object)
            self._ring_read(buf, head, k, col)
            clear_ring(buf, alloc, head, k)
            objs[i] = col
        claim.objs = objs
        end = head + k
        self._head = end if end < alloc else end - alloc
        engine = self._engine
        engine.size -= k
        engine.dequeued += k
        engine.out_busy += k
        self._claims.append(claim)
        return claim

    def _copy_out(self, claim: _Claim) -> list[np.ndarray[Any, Any]]:
        if claim.rows is not None:  # taken from the line at the claim
            return claim.rows
        k, pos, src = claim.k, claim.pos, claim.src
        alloc = src[0].shape[0]
        end = pos + k
        result: list[np.ndarray[Any, Any]] = []
        outs, offset = claim.outs, claim.offset
        for i in range(len(src)):
            if i in claim.objs:
                col = claim.objs[i]
                if outs is not None:
                    outs[i][offset : offset + k] = col
                    col = outs[i][offset : offset + k]
                result.append(col)
                continue
            buf = src[i]
            if outs is not None:
                dst = outs[i][offset : offset + k]
                if end <= alloc:
                    dst[...] = buf[pos:end]
                else:
                    dst[: alloc - pos] = buf[pos:]
                    dst[alloc - pos :] = buf[: end - alloc]
                result.append(dst)
            elif end <= alloc:
                result.append(buf[pos:end].copy())
            else:
                result.append(np.concatenate((buf[pos:], buf[: end - alloc])))
        return result

    def _finish_claim(self, claim: _Claim, copied: bool) -> None:
        chunk = None if copied else self._claimed_rows(claim)
        claim.done = True
        if claim.rows is not None:  # from the line: no slot was busy
            claim.rows = None
        elif not claim.stale:
            claims = self._claims
            while claims and claims[0].done:
                self._engine.out_busy -= claims.popleft().k
        claim.src = []
        if chunk is not None:
            # Interrupted: the rows go back to the front, in order (T3).
            self._engine.restore([chunk])
            self._engine.flush()
        elif self._producers:
            self._engine.flush()

    def _claimed_rows(self, claim: _Claim) -> list[np.ndarray[Any, Any]]:
        """A claim's rows as columns, read from its slots (lock held)."""
        if claim.rows is not None:
            return claim.rows
        chunk = []
        for i, buf in enumerate(claim.src):
            if i in claim.objs:
                chunk.append(claim.objs[i])
            else:
                col = np.empty_like(buf, shape=(claim.k, *buf.shape[1:]))
                first = min(claim.k, buf.shape[0] - claim.pos)
                col[:first] = buf[claim.pos : claim.pos + first]
                col[first:] = buf[: claim.k - first]
                chunk.append(col)
        return chunk


class _Reservation:
    """Ring slots ``[pos, pos + n)`` being written by an enqueue_many."""

    __slots__ = ("as_block", "dst", "dst_pos", "n", "pos", "src")

    def __init__(self, pos: int, n: int, src: list[np.ndarray[Any, Any]], dst: list[np.ndarray[Any, Any]]) -> None:
        self.pos = pos  # guarded by the queue's lock: where the rows are now (a fresh layout moves them)
        self.n = n
        self.src = src
        # Where the copy writes (fixed: the copy does not take the lock).
        self.dst = dst
        self.dst_pos = pos
        # A block for the line (see FIFOQueue): ``dst`` becomes its columns,
        # copied from ``src`` outside the lock.
        self.as_block = False


class _Claim:
    """Ring slots ``[pos, pos + k)`` being read by a dequeue_many."""

    __slots__ = ("done", "k", "objs", "offset", "outs", "pos", "rows", "src", "stale")

    def __init__(
        self, pos: int, k: int, src: list[np.ndarray[Any, Any]],
        outs: list[np.ndarray[Any, Any]] | None, offset: int,
    ) -> None:
        self.pos = pos
        self.k = k
        self.src = src  # the columns the copy reads from
        self.outs = outs
        self.offset = offset
        self.objs: dict[int, np.ndarray[Any, Any]] = {}
        self.done = False  # guarded by the queue's lock
        self.stale = False  # guarded by the queue's lock: its slots were left behind by a fresh layout
        # Rows taken from the line of blocks at the claim (no slot busy).
        self.rows: list[np.ndarray[Any, Any]] | None = None
