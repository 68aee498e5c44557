"""Copy engines: how a feeder moves a staged host batch to its devices.

A feeder fills a host *slot* (one buffer per component), asks the engine to
copy row ranges of it to devices, then records the engine's events. A slot is
refilled only once its events are done, so a copy never reads a buffer that is
being overwritten; the consumer's side waits on the same events before it
touches the result.

* :class:`CudaEngine` — pinned host buffers, ``copy_(non_blocking=True)`` on one
  side stream per device, CUDA events; the consumer's stream waits on them
  (no host sync) and ``record_stream`` keeps the allocator from reusing a
  tensor while the consumer's stream still uses it.
* :class:`HostEngine` — the same protocol for the CPU: copies run later, in
  order, on a named copy thread, and events are ``threading.Event``s. It
  exercises the buffer-recycling logic on machines without CUDA.

A feeder's ``device_transform`` goes through ``engine.transform``: on CUDA
it is issued on the copy stream (after the copy, before the recorded
event); on the host engine it waits for the copies issued so far, then runs.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np

from feedq._devices.extras import require
from feedq.errors import DeadlineExceededError

__all__ = ["CudaEngine", "HostEngine", "Slot"]


class Slot:
    """One staging buffer set: per component, host rows and their pinned tensor.

    Attributes:
        host: per component, an array of ``capacity`` rows (``None`` until
            first sized).
        pinned: per component, the torch tensor backing ``host`` (CUDA engine
            and device dtypes only), else ``None``.
        events: the copy events that must complete before ``host`` is reused.
    """

    def __init__(self, ncomp: int) -> None:
        self.host: list[np.ndarray[Any, Any] | None] = [None] * ncomp
        self.pinned: list[Any] = [None] * ncomp
        self.events: list[Any] = []


class HostEngine:
    """Asynchronous host-to-host copies on a copy thread: the CPU stand-in for CUDA.

    ``copy`` returns the destination array at once and fills it later, as
    ``copy_(non_blocking=True)`` does; ``record`` returns an event that is set
    once every copy issued before it has run.
    """

    def __init__(self, name: str) -> None:
        self._mutex = threading.Lock()
        # notified by copy()/record()/close(); waited on by the copy thread
        self._work = threading.Condition(self._mutex)
        self._tasks: deque[Any] = deque()  # guarded by self._mutex
        self._closed = False  # guarded by self._mutex
        # Copies issued since the last transform waited for them (feeder thread only).
        self._unsynced = False
        self._thread = threading.Thread(target=self._run, name=f"{name}-copy", daemon=True)
        self._thread.start()

    def alloc(self, shape: tuple[int, ...], dtype: np.dtype[Any]) -> tuple[np.ndarray[Any, Any],
                                                                          Any]:
        """A host buffer (there is no pinned memory without CUDA)."""
        return np.empty(shape, dtype), None

    def copy(self, slot: Slot, comp: int, start: int, stop: int, torch_device: str) -> Any:
        """Schedules ``slot.host[comp][start:stop]`` into a new array, returned now."""
        host = slot.host[comp]
        if host is None:
            raise RuntimeError("copy from an unsized slot")
        src = host[start:stop]
        dst = np.empty_like(src)
        with self._mutex:
            self._tasks.append((dst, src))
            self._work.notify()
        self._unsynced = True
        return dst

    def transform(self, fn: Callable[[Any], Any], value: Any, torch_device: str) -> Any:
        """``fn(value)`` once the copies issued so far are done (they fill ``value``)."""
        if self._unsynced:
            self.wait(self.record(), None)
            self._unsynced = False
        return fn(value)

    def record(self) -> list[Any]:
        """An event set once the copies scheduled so far are done."""
        event = threading.Event()
        with self._mutex:
            self._tasks.append(event)
            self._work.notify()
        return [event]

    def wait(self, events: list[Any], deadline: float | None) -> None:
        """Blocks until ``events`` are set.

        Raises:
            DeadlineExceededError: ``deadline`` (a ``time.monotonic()`` value) passed.
        """
        for event in events:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not event.wait(remaining):
                raise DeadlineExceededError("timed out waiting for a host copy")

    def done(self, events: list[Any]) -> bool:
        """True when every event is set (never blocks)."""
        return all(event.is_set() for event in events)

    def hand_over(self, events: list[Any], outputs: list[Any]) -> None:
        """Consumer side: the results are readable once the copies are done."""
        self.wait(events, None)

    def thread_init(self) -> None:
        """Nothing to set up in the feeder thread."""

    def _copy(self, dst: np.ndarray[Any, Any], src: np.ndarray[Any, Any]) -> None:
        # One place for the copy itself, so tests can slow it down.
        np.copyto(dst, src)

    def _run(self) -> None:
        while True:
            with self._mutex:
                while not self._tasks and not self._closed:
                    self._work.wait()
                if not self._tasks:
                    return  # closed and drained
                task = self._tasks.popleft()
            if isinstance(task, threading.Event):
                task.set()
            else:
                self._copy(*task)

    def close(self, timeout: float | None = None) -> bool:
        """Runs the scheduled copies, stops the copy thread; True if it joined."""
        with self._mutex:
            self._closed = True
            self._work.notify_all()
        self._thread.join(timeout)
        return not self._thread.is_alive()


class CudaEngine:
    """Pinned host buffers and asynchronous copies on one side stream per device."""

    def __init__(self, name: str, physical_devices: list[int]) -> None:
        self._torch = torch = require("torch", "DeviceFeeder on a CUDA device")
        self._streams = {i: torch.cuda.Stream(device=i) for i in physical_devices}
        self._pending: set[int] = set()  # devices copied to since the last record()

    def alloc(self, shape: tuple[int, ...], dtype: np.dtype[Any]) -> tuple[np.ndarray[Any, Any],
                                                                          Any]:
        """A pinned tensor and its NumPy view (the queue dequeues into the view)."""
        if dtype.kind not in "biufc":
            return np.empty(shape, dtype), None
        torch = self._torch
        tdtype = torch.from_numpy(np.empty(0, dtype)).dtype
        tensor = torch.empty(shape, dtype=tdtype, pin_memory=True)
        return tensor.numpy(), tensor

    def copy(self, slot: Slot, comp: int, start: int, stop: int, torch_device: str) -> Any:
        """Issues the copy of rows ``[start, stop)`` on the device's side stream."""
        torch = self._torch
        src = slot.pinned[comp][start:stop]
        index = torch.device(torch_device).index
        stream = self._streams[index]
        with torch.cuda.device(index), torch.cuda.stream(stream):
            # Allocated on the side stream; hand_over() records the consumer's
            # stream on it before the consumer sees it.
            dst = torch.empty(src.shape, dtype=src.dtype, device=torch_device)
            dst.copy_(src, non_blocking=True)
        self._pending.add(index)
        return dst

    def transform(self, fn: Callable[[Any], Any], value: Any, torch_device: str) -> Any:
        """``fn(value)`` on the device's copy stream, so it runs after the copy
        and before the event :meth:`record` puts on that stream; a host
        component's ``fn`` runs at once."""
        torch = self._torch
        index = torch.device(torch_device).index
        if index is None or index not in self._streams:
            return fn(value)
        with torch.cuda.device(index), torch.cuda.stream(self._streams[index]):
            # Allocated on the side stream too: hand_over() records the
            # consumer's stream on the result, as on a copy's.
            result = fn(value)
        self._pending.add(index)
        return result

    def record(self) -> list[Any]:
        """One event per device copied to since the last call."""
        events = []
        for index in sorted(self._pending):
            event = self._torch.cuda.Event()
            event.record(self._streams[index])
            events.append((index, event))
        self._pending.clear()
        return events

    def wait(self, events: list[Any], deadline: float | None) -> None:
        """Blocks the calling thread until the copies are done (they always finish)."""
        for _, event in events:
            event.synchronize()

    def done(self, events: list[Any]) -> bool:
        """True when every copy has completed (never blocks)."""
        return all(event.query() for _, event in events)

    def thread_init(self) -> None:
        """In the feeder thread: its default device, and one intra-op thread
        (as torch's own pin-memory thread does) so it does not compete with
        the training loop for cores."""
        self._torch.set_num_threads(1)
        self._torch.cuda.set_device(min(self._streams))

    def hand_over(self, events: list[Any], outputs: list[Any]) -> None:
        """Consumer side: its current streams wait for the copies (no host sync)."""
        torch = self._torch
        for index, event in events:
            torch.cuda.current_stream(index).wait_event(event)
        for tensor in outputs:
            if isinstance(tensor, torch.Tensor) and tensor.is_cuda:
                tensor.record_stream(torch.cuda.current_stream(tensor.device))

    def close(self, timeout: float | None = None) -> bool:
        """Nothing to stop: the streams go with the engine."""
        return True
