"""Prometheus export of :meth:`feedq.Pipeline.statistics` (the ``prometheus`` extra).

:func:`prometheus_collector` returns a collector for ``prometheus_client``:
register it with a registry and expose it the way the application already
does (``prometheus_client.start_http_server``, a WSGI app, a push gateway);
feedq serves nothing itself. Each scrape takes one ``statistics()`` snapshot.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from feedq.errors import MissingExtraError

__all__ = ["prometheus_collector"]


def _client() -> Any:
    try:
        from prometheus_client import core
    except ImportError as exc:
        raise MissingExtraError(
            "feedq.prometheus_collector needs the prometheus_client package, which is not "
            'installed: pip install "feedq[prometheus]"',
            name="prometheus_client",
        ) from exc
    return core


class _PipelineCollector:
    """A ``prometheus_client`` custom collector over one pipeline."""

    def __init__(self, pipe: Any, prefix: str, labels: dict[str, str], core: Any) -> None:
        self._pipe = pipe
        self._prefix = prefix
        self._labels = dict(labels)
        self._core = core

    def describe(self) -> list[Any]:
        # Nothing up front: registering must not take a snapshot.
        return []

    def collect(self) -> Iterator[Any]:
        core, p = self._core, self._prefix
        extra = list(self._labels)
        values = list(self._labels.values())
        stats = self._pipe.statistics()

        def family(kind: str, name: str, doc: str, labels: list[str]) -> Any:
            cls = core.CounterMetricFamily if kind == "counter" else core.GaugeMetricFamily
            return cls(f"{p}_{name}", doc, labels=[*extra, *labels])

        elapsed = family("gauge", "elapsed_seconds", "Seconds since the pipeline started.", [])
        elapsed.add_metric(values, stats.elapsed)
        yield elapsed

        stage_labels = ["stage", "kind"]
        busy = family("counter", "stage_busy_seconds",
                      "Seconds stage threads spent in their op, not waiting on queues.",
                      stage_labels)
        inp = family("counter", "stage_input_wait_seconds",
                     "Seconds stage threads were blocked on an upstream queue.", stage_labels)
        out = family("counter", "stage_output_wait_seconds",
                     "Seconds stage threads were blocked on their full output queue.",
                     stage_labels)
        recs = family("counter", "stage_records", "Elements a stage put into its queue.",
                      stage_labels)
        nbytes = family("counter", "stage_bytes", "Bytes of those elements.", stage_labels)
        threads = family("gauge", "stage_threads", "Threads (or worker processes) of a stage.",
                         stage_labels)
        for s in stats.stages:
            lv = [*values, s.name, s.kind]
            busy.add_metric(lv, s.busy_s)
            inp.add_metric(lv, s.input_wait_s)
            out.add_metric(lv, s.output_wait_s)
            recs.add_metric(lv, s.records_out)
            nbytes.add_metric(lv, s.bytes_out)
            threads.add_metric(lv, s.threads)
        yield from (busy, inp, out, recs, nbytes, threads)

        size = family("gauge", "queue_size", "Elements stored in a queue now.", ["queue"])
        cap = family("gauge", "queue_capacity", "A queue's capacity (-1: unbounded).", ["queue"])
        mean = family("gauge", "queue_mean_fill",
                      "Mean share of the capacity found stored by dequeue calls.", ["queue"])
        peak = family("gauge", "queue_max_fill", "Peak size as a share of the capacity.",
                      ["queue"])
        enq = family("counter", "queue_enqueue_wait_seconds",
                     "Seconds enqueue calls were blocked (queue full).", ["queue"])
        deq = family("counter", "queue_dequeue_wait_seconds",
                     "Seconds dequeue calls were blocked (queue empty).", ["queue"])
        for q in stats.queues:
            lv = [*values, q.name]
            size.add_metric(lv, q.size)
            cap.add_metric(lv, q.capacity)
            mean.add_metric(lv, q.mean_fill)
            peak.add_metric(lv, q.max_fill)
            enq.add_metric(lv, q.enqueue_wait_s)
            deq.add_metric(lv, q.dequeue_wait_s)
        yield from (size, cap, mean, peak, enq, deq)

        sb_size = family("gauge", "shuffle_buffer_size",
                         "Elements in a shuffle buffer now (draws at min_after_dequeue + "
                         "batch_size).", ["buffer"])
        sb_over = family("gauge", "shuffle_fraction_over_min_after_dequeue",
                         "TF1's summary: elements held over min_after_dequeue / "
                         "(capacity - min_after_dequeue).", ["buffer"])
        for sb in stats.shuffle_buffers:
            sb_size.add_metric([*values, sb.name], sb.size)
            sb_over.add_metric([*values, sb.name], sb.fraction_over_min_after_dequeue)
        yield from (sb_size, sb_over)

        c = stats.consumer
        takes = family("counter", "consumer_takes", "Evaluations taken by the consumer.", [])
        takes.add_metric(values, c.takes)
        waited = family("counter", "consumer_waited_takes", "Takes that waited for data.", [])
        waited.add_metric(values, c.waited_takes)
        wait_s = family("counter", "consumer_wait_seconds", "Seconds the consumer waited.", [])
        wait_s.add_metric(values, c.wait_s)
        ready = family("gauge", "consumer_readiness", "Share of takes that did not wait.", [])
        ready.add_metric(values, c.readiness)
        yield from (takes, waited, wait_s, ready)

        b = stats.bottleneck
        info = family("gauge", "bottleneck",
                      "1 for the limiting stage ('' when the consumer is the limit).", ["stage"])
        info.add_metric([*values, b.stage or ""], 1.0)
        yield info


def prometheus_collector(
    pipe: Any, *, prefix: str = "feedq", labels: dict[str, str] | None = None
) -> Any:
    """A Prometheus collector for ``pipe``'s :meth:`~feedq.Pipeline.statistics`.

    Register it yourself; feedq runs no server::

        from prometheus_client import REGISTRY, start_http_server
        REGISTRY.register(feedq.prometheus_collector(pipe, labels={"job": "train"}))
        start_http_server(8000)

    Metrics (``<prefix>_...``): ``stage_busy_seconds``,
    ``stage_input_wait_seconds``, ``stage_output_wait_seconds``,
    ``stage_records``, ``stage_bytes`` (counters, labels ``stage``, ``kind``),
    ``stage_threads``; ``queue_size``, ``queue_capacity``,
    ``queue_mean_fill``, ``queue_max_fill`` (gauges),
    ``queue_enqueue_wait_seconds``, ``queue_dequeue_wait_seconds`` (label
    ``queue``); ``shuffle_buffer_size``,
    ``shuffle_fraction_over_min_after_dequeue`` (label ``buffer``);
    ``consumer_takes``, ``consumer_waited_takes``,
    ``consumer_wait_seconds``, ``consumer_readiness``; ``bottleneck``
    (label ``stage``); ``elapsed_seconds``.

    Args:
        pipe: the :class:`feedq.Pipeline`.
        prefix: the metric name prefix.
        labels: constant labels added to every sample (e.g. the job).

    Raises:
        MissingExtraError: ``prometheus_client`` is not installed
            (``pip install "feedq[prometheus]"``).
    """
    core = _client()
    return _PipelineCollector(pipe, prefix, labels or {}, core)
