"""Stages: a queue, the runner that fills it, and how a consumer takes from it.

A :class:`Stage` is what TF1 returned as a tensor from an input function;
``feedq.input`` builds them (producers and batchers) and this module holds
how they are evaluated: element or batch reads, the X1 check that a runner
feeding the stage was started, and X3 error forwarding.

A stage of a resumable pipeline is built with its resumption part
(``docs/resume.md``): a producer's :class:`~feedq._resume.producer.ProducerPart`
or a batcher's :class:`~feedq._resume.state.BatcherPart`. Its queue's last
column is hidden (unit codes, positions); every take hands it to the part.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from feedq._core import scope as _scope
from feedq._core.arrays import flatten_values
from feedq._resume.producer import ProducerPart
from feedq._resume.state import BatcherPart
from feedq.errors import (
    CancelledError,
    FailedPreconditionError,
    InvalidArgumentError,
    OutOfRangeError,
)
from feedq.input._sparse import SparseTable, batch_sparse
from feedq.queues import CancelToken, QueueBase, QueueStatistics
from feedq.runners import QueueRunner, QueueRunnerStatistics, runner_events

if TYPE_CHECKING:
    from feedq.input._producers import _Epochs
    from feedq.input._shuffle import ShuffleBuffer

__all__ = ["Stage", "StageStatistics"]


@dataclass(frozen=True)
class StageStatistics:
    """A snapshot of a stage: its queue, its runner, and dropped elements.

    Attributes:
        queue: the queue's statistics (size, capacity, waiters...).
        runner: the runner's statistics (threads alive, ops run, errors).
        dropped: elements left behind at the end because they did not fill a
            batch (``allow_smaller_final_batch=False``, X4).
        epochs_started: producers only: epochs begun so far.
    """

    queue: QueueStatistics
    runner: QueueRunnerStatistics
    dropped: int
    epochs_started: int | None


class Stage:
    """A queue, the runner that fills it, and how to take from it.

    ``dequeue()`` returns one evaluation: an element for producers, a batch
    for batchers. Structures follow B2: a dict for dict inputs, a bare value
    for one component, else a list. A sparse component (B12, see
    ``feedq.input._sparse``) is a :class:`feedq.readers.SparseTensorValue`
    for the whole batch.

    A stage is made whole by its builder: ``resumption`` (a resumable
    pipeline's producer or batcher part; the queue's last column is then
    hidden) and ``shuffle`` (a shuffling batcher's buffer and the capacity
    asked for, for the statistics) are given here, never set later.
    """

    def __init__(
        self,
        queue: QueueBase,
        runner: QueueRunner,
        *,
        names: list[str] | None,
        single: bool,
        batch_size: int | None = None,
        smaller_final: bool = False,
        upstream: Sequence[Stage] = (),
        epochs: _Epochs | None = None,
        sparse: list[tuple[np.dtype[Any], int] | None] | None = None,
        sparse_table: SparseTable | None = None,
        resumption: ProducerPart | BatcherPart | None = None,
        shuffle: tuple[ShuffleBuffer, int] | None = None,
    ) -> None:
        self._queue = queue
        # Resumable pipelines: the queue's last column is not the stage's (a
        # producer's unit codes, a batcher's positions); takes go to the part.
        self._resumption = resumption
        self._hidden = 0 if resumption is None else 1
        # A shuffling batcher's (ShuffleBuffer, capacity given), for the statistics.
        self._shuffle = shuffle
        self._runner = runner
        self._names = names
        self._single = single
        self._batch_size = batch_size
        self._smaller_final = smaller_final
        self._upstream = list(upstream)
        self._epochs = epochs
        # Per component, (values' dtype, rank of one element) for a sparse
        # one, whose queue column holds handles into _sparse_table.
        self._sparse = sparse
        self._sparse_table = sparse_table
        self._dropped = 0
        self._checked = False
        pipe = _scope.current_pipeline()
        self._pipeline = pipe
        if pipe is not None:
            pipe.output = self

    # -- what it holds ------------------------------------------------------------

    @property
    def queue(self) -> QueueBase:
        """The queue this stage takes from."""
        return self._queue

    @property
    def runner(self) -> QueueRunner:
        """The runner that fills :attr:`queue`."""
        return self._runner

    @property
    def shuffle_buffer(self) -> tuple[ShuffleBuffer, int] | None:
        """A shuffling batcher's buffer and the capacity it was given (for
        the statistics); ``None`` for other stages."""
        return self._shuffle

    @property
    def batch_size(self) -> int | None:
        """Elements per evaluation for batchers; ``None`` for producers."""
        return self._batch_size

    @property
    def names(self) -> list[str] | None:
        """Component names when evaluations are dicts."""
        return None if self._names is None else list(self._names)

    @property
    def dtypes(self) -> list[np.dtype[Any]]:
        """One dtype per component (a sparse one's values' dtype)."""
        dtypes = self._queue.dtypes[: len(self._queue.dtypes) - self._hidden]
        if self._sparse is None:
            return dtypes
        return [d if sp is None else sp[0] for d, sp in zip(dtypes, self._sparse)]

    @property
    def shapes(self) -> list[tuple[int | None, ...] | None]:
        """Shape of one element's components (without the batch dimension;
        a sparse one's dense shape, its dimensions unknown)."""
        shapes = self._queue.shapes[: len(self._queue.shapes) - self._hidden]
        if self._sparse is None:
            return shapes
        return [s if sp is None else (None,) * sp[1] for s, sp in zip(shapes, self._sparse)]

    def _sparse_flags(self) -> list[bool]:
        """Per component, whether it is sparse."""
        if self._sparse is None:
            return [False] * len(self.dtypes)
        return [sp is not None for sp in self._sparse]

    @property
    def output_shapes(self) -> list[tuple[int | None, ...] | None]:
        """Shapes of one evaluation (B4: ``[batch_size] + shape``, or
        ``[None] + shape`` with ``allow_smaller_final_batch``)."""
        if self._batch_size is None:
            return self.shapes
        lead = None if self._smaller_final else self._batch_size
        return [None if s is None else (lead, *s) for s in self.shapes]

    def statistics(self) -> StageStatistics:
        """Queue and runner statistics, and dropped elements (X4)."""
        return StageStatistics(
            queue=self._queue.statistics(),
            runner=self._runner.statistics(),
            dropped=self._dropped,
            epochs_started=None if self._epochs is None else self._epochs.started,
        )

    def __repr__(self) -> str:
        kind = "batch" if self._batch_size else "element"
        return f"Stage({kind}, queue={self._queue.name!r}, size={self._queue.size()})"

    # -- taking -------------------------------------------------------------------

    def _runners(self) -> Iterator[QueueRunner]:
        yield self._runner
        for s in self._upstream:
            yield from s._runners()

    def _check_started(self) -> None:
        """X1: refuse to wait on a queue no started runner will ever fill."""
        if self._checked:
            return
        pipe = self._pipeline
        if pipe is not None and pipe.resumption.pending is not None:
            raise InvalidArgumentError(
                "the pipeline's state=... was never restored: it needs a producer and a batcher "
                "built inside the pipeline"
            )
        idle = [r.name for r in self._runners() if not r.started]
        if idle:
            raise FailedPreconditionError(
                f"queue '{self._queue.name}' is fed by queue runners that were never started: "
                f"{', '.join(repr(n) for n in idle)}; call feedq.start_queue_runners(coord) or "
                "build the pipeline inside `with feedq.Pipeline():`"
            )
        self._checked = True

    def _pack(self, cols: list[Any]) -> Any:
        if self._names is not None:
            return dict(zip(self._names, cols))
        if self._single:
            return cols[0]
        return list(cols)

    def _take(self, how: str, n: int, timeout: float | None, into: list[Any] | None = None,
              cancel: CancelToken | None = None) -> list[Any]:
        """Dequeue from the stage's queue, as a list of components.

        ``how``: ``"one"`` (an element), ``"many"`` (exactly ``n``),
        ``"up_to"`` (up to ``n``, fewer only at the end) or ``"available"``
        (up to ``n``, as many as are queued); ``into`` and ``cancel`` are the
        queue's ``out=`` (hidden columns included) and ``cancel=`` for
        ``"many"`` and ``"up_to"``. Errors are translated (X1, X3); the end
        of the data notifies control-dependency gates.
        """
        self._check_started()
        q = self._queue
        try:
            if how == "one":
                out = q.dequeue(timeout=timeout)
            elif how == "many":
                out = q.dequeue_many(n, timeout=timeout, out=into, cancel=cancel)
            elif how == "up_to":
                out = q.dequeue_up_to(n, timeout=timeout, out=into, cancel=cancel)
            else:
                out = q.dequeue_available(n)
        except CancelledError as exc:
            _reraise_cause(exc)
            raise
        except OutOfRangeError:
            if how == "many":
                self._dropped = q.size()  # X4: what could not fill a batch
            runner_events.notify()
            raise
        if q.is_closed() and q.size() == 0:
            runner_events.notify()  # drained: a dependency on this queue is done
        cols = out if isinstance(out, list) else [out]
        if self._resumption is not None:
            cols = list(cols)
            self._resumption.on_take(np.asarray(cols.pop()))
        if self._sparse is not None:
            self._decode_sparse(cols, batched=how != "one")
        return cols

    def _decode_sparse(self, cols: list[Any], batched: bool) -> None:
        """Replace the handles of sparse components by their values: one
        value per batch (``batched``) or the element's own."""
        assert self._sparse is not None and self._sparse_table is not None
        for i, sp in enumerate(self._sparse):
            if sp is None:
                continue
            taken = self._sparse_table.take(cols[i])
            cols[i] = batch_sparse(taken, sp[1], sp[0]) if batched else taken[0]

    def _raw(self, timeout: float | None) -> list[Any]:
        """One evaluation as a list of components (errors translated)."""
        if self._batch_size is None:
            return self._take("one", 1, timeout)
        return self._take("up_to" if self._smaller_final else "many", self._batch_size, timeout)

    def _block(self, n: int, timeout: float | None) -> list[Any]:
        """Up to ``n`` evaluations of an element stage, stacked (batch-first)."""
        return self._take("up_to", n, timeout)

    def _stream(self, n: int) -> list[Any]:
        """What a batcher reads from an element stage: up to ``n`` elements,
        as many as are queued, waiting only while none is (a big block when
        data is plentiful, no added latency when it trickles)."""
        return self._take("available", n, None)

    def dequeue(self, timeout: float | None = None) -> Any:
        """One evaluation: an element (producers) or a batch (batchers).

        Args:
            timeout: seconds to wait (``None``: the process default, 0: do
                not wait).

        Raises:
            OutOfRangeError: the end of the data.
            FailedPreconditionError: a runner feeding this stage was never
                started (X1).
            DeadlineExceededError: timed out; nothing was taken.
            CancelledError: the pipeline was stopped.
            Exception: the error that made a runner of this pipeline fail
                (X3), with the runner thread's traceback.
        """
        return self._pack(self._raw(timeout))

    def dequeue_up_to(self, n: int, timeout: float | None = None) -> Any:
        """Element stages: up to ``n`` elements stacked on axis 0 (fewer only
        at the end of the data)."""
        if self._batch_size is not None:
            raise TypeError("dequeue_up_to is for element stages; a batcher's dequeue() returns a batch")
        return self._pack(self._block(n, timeout))

    def dequeue_many(self, n: int, timeout: float | None = None, out: Any = None, *,
                     cancel: CancelToken | None = None) -> Any:
        """One evaluation of ``n`` rows, written into ``out`` when given (the
        queue contract's ``dequeue_many(n, out=)``, for a caller that owns
        the memory: a :class:`feedq.DeviceFeeder`'s pinned staging slot).

        A batcher's evaluation is its batch: ``n`` must be its
        ``batch_size``, and the call takes the batch :meth:`dequeue` would
        (the last one shorter with ``allow_smaller_final_batch``); its
        resumption ticket and positions are filed the same way, so
        ``state_dict()`` does not depend on which call took a batch. An
        element stage takes exactly ``n`` elements (Q27 at the end).

        Args:
            n: rows to take.
            timeout: seconds to wait (``None``: the process default, 0: do
                not wait).
            out: buffers structured like the result (bare array / list /
                dict), each with at least ``n`` rows of the component's
                dtype and shape; the result's arrays are views ``out[i][:k]``.
                Fixed-shape components only (not sparse ones).
            cancel: a token that cancels this call (nothing is lost: the
                rows go back to the queue, T3).

        Raises:
            InvalidArgumentError: ``n`` is not the batcher's batch size;
                ``out=`` with sparse or unshaped components, or buffers of
                the wrong dtype or shape.
            OutOfRangeError, FailedPreconditionError, DeadlineExceededError,
            CancelledError, Exception: as :meth:`dequeue`.
        """
        if self._batch_size is not None and n != self._batch_size:
            raise InvalidArgumentError(
                f"dequeue_many({n!r}) on a batcher of batch_size {self._batch_size}: a "
                "batcher's evaluation is one batch")
        into = None
        if out is not None:
            if self._sparse is not None and any(sp is not None for sp in self._sparse):
                raise InvalidArgumentError("dequeue_many(out=) needs dense components; "
                                           "this stage has sparse ones")
            into = flatten_values(out, self._names, len(self.dtypes), "Stage.dequeue_many out=")
            q = self._queue
            for dtype, shape in zip(q.dtypes[len(into):], q.shapes[len(into):]):
                into.append(np.empty((n, *(shape or ())), dtype))  # hidden: fresh, the ledger keeps it
        how = "up_to" if self._smaller_final and self._batch_size is not None else "many"
        return self._pack(self._take(how, n, timeout, into, cancel))

    # -- resumption ---------------------------------------------------------------

    @property
    def taken(self) -> int:
        """Evaluations taken from this stage so far (the next one's ticket).

        Counted for stages of a resumable pipeline (see :meth:`state_dict`);
        0 otherwise.
        """
        part = self._resumption
        return part.ledger.taken if isinstance(part, BatcherPart) else 0

    def state_dict(self, upto: int | None = None) -> dict[str, Any]:
        """Where a consumer of this stage is: what a new process needs to
        go on exactly from here (see ``docs/resume.md``).

        The state describes what was *taken* from the stage (delivered),
        not what readers have read: elements in queues and the shuffle
        buffer are saved as positions and re-read on restore. Plain data
        (dicts, lists, ints, bytes) that pickles and that ``torch.save``
        accepts.

        Args:
            upto: as if only the evaluations with ticket ``< upto`` had been
                taken (the others, e.g. prefetched ones, count as not
                delivered); None: all taken so far. The last 1,024 tickets
                are known.

        Raises:
            InvalidArgumentError: the stage is not resumable (not built in a
                ``feedq.Pipeline(resumable=True)``, not a batcher, or rows
                without positions went through it), or ``upto`` is out of
                the window.
        """
        part = self._resumption
        if not isinstance(part, BatcherPart):
            raise InvalidArgumentError(_NOT_RESUMABLE)
        return part.state_dict(upto)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from ``state`` (from :meth:`state_dict` of the same
        pipeline, built the same way), before anything runs.

        Raises:
            FailedPreconditionError: the stage's runners already started or
                something was taken.
            InvalidArgumentError: the stage is not resumable, or the state is
                from another pipeline (it names what differs).
        """
        part = self._resumption
        if not isinstance(part, BatcherPart):
            raise InvalidArgumentError(_NOT_RESUMABLE)
        part.load_state_dict(state, list(self._runners()))

    def __iter__(self) -> Iterator[Any]:
        """Evaluations until the end of the data (or a clean stop)."""
        while True:
            try:
                yield self.dequeue()
            except OutOfRangeError:
                return
            except CancelledError as exc:
                if exc.__cause__ is None:
                    return  # a clean stop of the pipeline
                raise


_NOT_RESUMABLE = (
    "this stage is not resumable: state_dict() is for batchers built inside "
    "feedq.Pipeline(resumable=True) (or Pipeline(state=...))"
)


def _reraise_cause(exc: CancelledError) -> None:
    """X3: a queue cancelled because a runner failed: raise the runner's error."""
    cause = exc.__cause__
    if cause is not None and not isinstance(cause, (OutOfRangeError, CancelledError)):
        raise cause.with_traceback(cause.__traceback__) from None
