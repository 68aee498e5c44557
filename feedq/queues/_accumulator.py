"""ConditionalAccumulator: gradient aggregation with staleness (spec A1–A4).

Replicas ``apply_grad(g, local_step)``; a chief ``take_grad(n)`` blocks until
``n`` gradients arrived, returns their mean (or sum), zeroes the accumulator
and advances the global step. A gradient computed against an older global
step is dropped silently (A2), which is how TF1's SyncReplicasOptimizer
discards stale updates.
"""

from __future__ import annotations

import itertools
import threading
import time
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from feedq._core.arrays import as_torch_free_array
from feedq._core.timeouts import resolve_timeout
from feedq.errors import CancelledError, DeadlineExceededError, InvalidArgumentError
from feedq.queues._cancel import CancelToken, Waiter
from feedq.queues._registry import SHARED_ACCUMULATORS, SharedByName

__all__ = ["AccumulatorStatistics", "ConditionalAccumulator", "reset_shared_accumulators"]

_REDUCTIONS = ("MEAN", "SUM")

#: A validated constructor call: dtype, declared shape, shared_name, name, reduction.
_Request = tuple[np.dtype[Any], tuple[int, ...] | None, str | None, str | None, str]


def reset_shared_accumulators(shared_name: str | None = None) -> None:
    """Forget one shared accumulator (or all); open handles keep working."""
    if shared_name is None:
        SHARED_ACCUMULATORS.clear()
    else:
        SHARED_ACCUMULATORS.pop(shared_name)


@dataclass(frozen=True)
class AccumulatorStatistics:
    """A snapshot of an accumulator (STYLE 8).

    Attributes:
        name: the accumulator's name.
        global_step: the current global step (A1).
        num_accumulated: gradients summed since the last take (A4).
        applied: gradients accepted so far.
        dropped_stale: gradients dropped because ``local_step < global_step`` (A2).
        waiting_takers: ``take_grad`` calls blocked now.
    """

    name: str
    global_step: int
    num_accumulated: int
    applied: int
    dropped_stale: int
    waiting_takers: int


class ConditionalAccumulator(metaclass=SharedByName):
    """Accumulates gradients and hands out their mean (TF1, spec A1–A4).

    Usage::

        acc = ConditionalAccumulator(np.float32, shape=[2])
        acc.apply_grad(np.array([1.0, 2.0]), local_step=0)
        acc.apply_grad(np.array([3.0, 4.0]), local_step=0)
        acc.take_grad(2)        # array([2., 3.]); global step is now 1
        acc.apply_grad(np.zeros(2), local_step=0)   # stale: dropped (A2)

    Differences from TF1: an integer dtype is rejected here (TF1 failed at
    first use, A1/X9); ``take_grad`` takes ``timeout=`` (T1) and a timed-out
    call leaves the state untouched (A3); the number of dropped stale
    gradients is observable in :meth:`statistics` (X4).

    Args:
        dtype: a floating dtype (A1).
        shape: the gradient shape, or ``None``: then the first accepted
            gradient fixes it (A2).
        shared_name: accumulators built with the same shared_name in one
            process are the same one; a mismatched re-open (dtype, shape,
            reduction) is an InvalidArgumentError.
        name: used in messages.
        reduction_type: ``"MEAN"`` (default) or ``"SUM"`` (A3).

    Raises:
        TypeError: a non-floating dtype.
        ValueError: an unknown reduction type or a bad shape.
    """

    _name_counter: ClassVar[itertools.count[int]] = itertools.count()

    def __init__(
        self,
        dtype: Any,
        shape: Any = None,
        shared_name: str | None = None,
        name: str | None = None,
        reduction_type: str = "MEAN",
    ) -> None:
        # Validates; an accumulator without a shared_name is built at once, a
        # shared one when the metaclass calls _open() (feedq.queues._registry).
        dt = np.dtype(dtype)
        if dt.kind != "f":
            raise TypeError(f"ConditionalAccumulator needs a floating dtype, got {dt} (A1)")
        if reduction_type not in _REDUCTIONS:
            raise ValueError(f"reduction_type must be one of {_REDUCTIONS}, got {reduction_type!r}")
        fixed = None if shape is None else _as_shape(shape)
        request: _Request = (dt, fixed, shared_name, name, reduction_type)
        if shared_name is None:
            self._create(request)
        else:
            self._request = request

    def _open(self) -> ConditionalAccumulator:
        request: _Request | None = self.__dict__.pop("_request", None)
        if request is None:
            return self
        dt, fixed, key, _, reduction_type = request
        return SHARED_ACCUMULATORS.get_or_create(
            "accumulator", key, lambda: self._create(request),
            lambda existing: existing._check_reopen(key, dt, fixed, reduction_type),
        )

    def _create(self, request: _Request) -> ConditionalAccumulator:
        dtype, shape, shared_name, name, reduction_type = request
        if name is None:
            n = next(ConditionalAccumulator._name_counter)
            name = "conditional_accumulator" if n == 0 else f"conditional_accumulator_{n}"
        self._name = name
        self._shared_name = shared_name
        self._dtype = dtype
        self._declared_shape = shape
        self._reduction = reduction_type
        # Re-entrant only so that Waiter.sleep can take it back robustly
        # after an asynchronous exception (see there).
        self._mutex = threading.RLock()
        self._shape = shape  # guarded by self._mutex: fixed by the first gradient (A2)
        self._sum: np.ndarray[Any, Any] | None = None  # guarded by self._mutex
        self._count = 0  # guarded by self._mutex
        self._global_step = 0  # guarded by self._mutex
        self._applied = 0  # guarded by self._mutex
        self._dropped = 0  # guarded by self._mutex
        # take_grad calls asleep now, with the count each needs: apply_grad
        # wakes those it satisfies, cancel() all, a token its own.
        self._takers: dict[Waiter, int] = {}  # guarded by self._mutex
        self._waiting = 0  # guarded by self._mutex
        self._cancel_cause: BaseException | None = None  # guarded by self._mutex
        self._cancelled = False  # guarded by self._mutex
        return self

    def check_reopen(self, requested: ConditionalAccumulator, shared_name: str | None = None) -> None:
        """Raise ``InvalidArgumentError`` unless ``requested`` (an accumulator
        built from a re-open's arguments) has this one's dtype, declared shape
        and reduction type. For registries other than the process's."""
        label = shared_name or self._shared_name or self._name
        self._check_reopen(label, requested._dtype, requested._declared_shape, requested._reduction)

    def _check_reopen(
        self, shared_name: str, dtype: np.dtype[Any], shape: tuple[int, ...] | None, reduction: str
    ) -> None:
        prefix = f"Shared accumulator '{shared_name}'"
        if dtype != self._dtype:
            raise InvalidArgumentError(f"{prefix} has dtype {self._dtype} but requested dtype was {dtype}")
        if shape != self._declared_shape:
            raise InvalidArgumentError(
                f"{prefix} has shape {_shape_text(self._declared_shape)} "
                f"but requested shape was {_shape_text(shape)}"
            )
        if reduction != self._reduction:
            raise InvalidArgumentError(
                f"{prefix} has reduction_type {self._reduction} but requested {reduction}"
            )

    # -- properties ---------------------------------------------------------------

    @property
    def name(self) -> str:
        """The accumulator's name (used in messages)."""
        return self._name

    @property
    def shared_name(self) -> str | None:
        """The name under which it is shared, if any."""
        return self._shared_name

    @property
    def dtype(self) -> np.dtype[Any]:
        """The gradient dtype (A1)."""
        return self._dtype

    @property
    def shape(self) -> tuple[int, ...] | None:
        """The gradient shape: declared, fixed by the first gradient, or None."""
        return self._shape

    @property
    def reduction_type(self) -> str:
        """``"MEAN"`` or ``"SUM"`` (A3)."""
        return self._reduction

    # -- operations -----------------------------------------------------------------

    def apply_grad(self, grad: Any, local_step: int = 0) -> bool:
        """Add a gradient unless it is stale (A2).

        Args:
            grad: an array of the accumulator's shape (cast to its dtype).
            local_step: the global step the gradient was computed at; a
                value below the current global step drops the gradient.

        Returns:
            True if the gradient was added, False if it was dropped as stale
            (TF1 returned nothing; the flag makes drops observable, X4).

        Raises:
            ValueError: the shape differs from the declared shape (static in TF1).
            InvalidArgumentError: without a declared shape, the shape differs
                from the first accepted gradient's (A2).
            CancelledError: the accumulator was cancelled.
        """
        arr = np.asarray(as_torch_free_array(grad, f"accumulator '{self._name}' grad"))
        if arr.dtype.kind not in "biuf":
            raise TypeError(f"accumulator '{self._name}': gradient must be numeric, got {arr.dtype}")
        if self._declared_shape is not None and arr.shape != self._declared_shape:
            raise ValueError(
                f"accumulator '{self._name}': Shape mismatch: expected "
                f"{list(self._declared_shape)}, got {list(arr.shape)}"
            )
        step = int(local_step)
        with self._mutex:
            if self._cancelled:
                raise self._cancelled_error("apply_grad")
            if step < self._global_step:
                self._dropped += 1
                return False
            if self._shape is None:
                self._shape = arr.shape
            elif arr.shape != self._shape:
                raise InvalidArgumentError(
                    f"accumulator '{self._name}': Shape mismatch: expected "
                    f"{list(self._shape)}, got {list(arr.shape)}"
                )
            value = arr.astype(self._dtype, copy=False)
            if self._sum is None:
                self._sum = np.array(value, dtype=self._dtype, copy=True)
            else:
                self._sum += value
            self._count += 1
            self._applied += 1
            for waiter, need in self._takers.items():
                if need <= self._count:
                    waiter.wake()
            return True

    def take_grad(
        self, num_required: int, timeout: float | None = None, *, cancel: CancelToken | None = None
    ) -> np.ndarray[Any, Any]:
        """Wait for ``num_required`` gradients, return their mean or sum (A3).

        All gradients accumulated so far are reduced (possibly more than
        ``num_required``); the accumulator is then zeroed and the global step
        advances by one.

        Args:
            num_required: gradients needed, >= 1.
            timeout: seconds to wait; ``None`` uses the process default
                (:func:`feedq.set_default_timeout`, itself ``None`` =
                forever), ``0`` does not wait, ``math.inf`` waits forever.
            cancel: a :class:`~feedq.queues.CancelToken`; firing it ends this
                call, which raises the token's cause (else ``CancelledError``)
                and leaves the accumulator untouched.

        Raises:
            InvalidArgumentError: ``num_required < 1`` (A3).
            DeadlineExceededError: timed out; the state is untouched (A3).
            CancelledError: the accumulator or the call was cancelled.
        """
        n = int(num_required)
        if n < 1:
            raise InvalidArgumentError(f"Argument num_required must be positive, but was {n}")
        return self._take(n, resolve_timeout(timeout), cancel)

    def _take(self, n: int, wait: float | None, token: CancelToken | None) -> np.ndarray[Any, Any]:
        if token is not None and token.fired:
            raise token.error()
        deadline = None if wait is None else time.monotonic() + wait
        waiter = Waiter()
        unsubscribe = None if token is None else token.on_fire(waiter.wake)
        try:
            with self._mutex:
                self._waiting += 1
                try:
                    while self._count < n:
                        waiter.arm()  # before the checks: a wake from now on is not lost
                        if self._cancelled:
                            raise self._cancelled_error("take_grad")
                        if token is not None and token.fired:
                            raise token.error()
                        remaining = None
                        if deadline is not None:
                            remaining = deadline - time.monotonic()
                            if remaining <= 0:
                                raise DeadlineExceededError(
                                    f"Timed out waiting for notification: accumulator '{self._name}' "
                                    f"take_grad({n}) after {wait:g} s (accumulated {self._count})"
                                )
                        self._takers[waiter] = n
                        waiter.sleep(self._mutex, remaining)
                finally:
                    # Also after Ctrl-C in the sleep (Waiter.sleep returns
                    # holding the lock): nothing was taken (A3).
                    self._takers.pop(waiter, None)
                    self._waiting -= 1
                assert self._sum is not None  # count >= 1 implies a sum
                result = self._sum / self._count if self._reduction == "MEAN" else self._sum
                result = np.asarray(result, dtype=self._dtype)
                self._sum = None
                self._count = 0
                self._global_step += 1
                return result
        finally:
            if unsubscribe is not None:
                unsubscribe()

    def set_global_step(self, new_global_step: int) -> None:
        """Set the global step, also to a lower value (A4)."""
        with self._mutex:
            self._global_step = int(new_global_step)

    def num_accumulated(self) -> int:
        """Gradients accumulated since the last take (A4)."""
        return self._count

    def global_step(self) -> int:
        """The current global step."""
        return self._global_step

    def cancel(self, cause: BaseException | None = None) -> None:
        """Fail every pending and later call with ``CancelledError`` (T4)."""
        with self._mutex:
            if not self._cancelled:
                self._cancelled = True
                self._cancel_cause = cause
            for waiter in self._takers:
                waiter.wake()

    def _cancelled_error(self, op: str) -> CancelledError:
        err = CancelledError(f"accumulator '{self._name}': {op} was cancelled")
        err.__cause__ = self._cancel_cause
        return err

    def statistics(self) -> AccumulatorStatistics:
        """A consistent snapshot (STYLE 8)."""
        with self._mutex:
            return AccumulatorStatistics(
                name=self._name,
                global_step=self._global_step,
                num_accumulated=self._count,
                applied=self._applied,
                dropped_stale=self._dropped,
                waiting_takers=self._waiting,
            )

    def __repr__(self) -> str:
        return (
            f"ConditionalAccumulator(name={self._name!r}, dtype={self._dtype}, "
            f"shape={_shape_text(self._shape)}, reduction_type={self._reduction!r})"
        )


def _as_shape(shape: Any) -> tuple[int, ...]:
    try:
        dims = tuple(int(d) for d in shape)
    except TypeError:
        raise ValueError(f"shape must be a sequence of ints, got {shape!r}") from None
    if any(d < 0 for d in dims):
        raise ValueError(f"shape dimensions must be >= 0, got {list(dims)}")
    return dims


def _shape_text(shape: tuple[int, ...] | None) -> str:
    return "unknown" if shape is None else str(list(shape))
