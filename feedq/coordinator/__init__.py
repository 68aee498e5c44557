"""Coordinator and LooperThread: stop, error reporting and joining of threads.

A :class:`Coordinator` is the one place where a set of cooperating threads
learns that it should stop, where the first error any of them hit is kept,
and where the main thread waits for all of them (TF1 ``tf.train.Coordinator``,
spec rules C1–C11). A :class:`LooperThread` runs a function repeatedly, at a
fixed rate, until the coordinator stops (L1–L4).

Usage::

    coord = feedq.Coordinator()
    threads = feedq.start_queue_runners(coord=coord)
    try:
        with coord.stop_on_exception():
            while not coord.should_stop():
                train_step(batch_queue.dequeue_many(32))
    finally:
        coord.request_stop()
        coord.join(threads)  # re-raises the first error any thread reported

Differences from TF1, on purpose:

* ``request_stop(ex)`` records exactly the exception it is given, with its
  traceback, whether an instance or an ``exc_info`` triple; TF1 recorded
  whatever ``sys.exc_info()`` held and crashed outside an ``except`` block
  (C4, X8).
* ``stop_on_exception()`` requests the stop for ``KeyboardInterrupt`` and
  ``SystemExit`` too, but lets them propagate instead of swallowing them
  (C11, X8): Ctrl-C must interrupt the program.
* ``join()`` is event driven: it wakes when a thread ends or a stop is
  requested, instead of polling every second (C6, X5).
* ``add_stop_callback(fn)`` tells other objects of a stop without a thread
  that waits for it; queue runners use it to cancel their queues, which
  removes TF1's ``close_on_stop`` thread and the hang of QR11 (X5).

Where things live: ``_coordinator`` holds :class:`Coordinator` (stop, first
error, join); ``_stop`` the exception recording it shares (``exc_info``
normalising, re-raising, the ``stop_on_exception`` context manager);
``_looper`` holds :class:`LooperThread`. Import both from here.
"""

from __future__ import annotations

from ._coordinator import Coordinator
from ._looper import LooperThread

__all__ = ["Coordinator", "LooperThread"]

# Show the public path in reprs and docs (feedq.coordinator.Coordinator).
Coordinator.__module__ = __name__
LooperThread.__module__ = __name__
