"""Observability: what a running pipeline is doing, read from its parts.

* :mod:`~feedq._observe.statistics` -- per-stage timing, queue fill,
  consumer readiness and the bottleneck verdict (``Pipeline.statistics()``);
* :mod:`~feedq._observe.stall` -- the monitor thread behind
  ``stall_timeout=`` and ``report_every=``;
* :mod:`~feedq._observe.prometheus` -- the Prometheus collector.

It reads queues, runners and the time accounts of :mod:`feedq._core.accounts`;
it changes nothing it observes.
"""
