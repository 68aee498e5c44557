"""The ground floor: helpers every package may use (they import only ``feedq.errors``).

* :mod:`~feedq._core.arrays` -- dtype normalising, torch-free array views,
  flattening and packing of element values;
* :mod:`~feedq._core.timeouts` -- the process-wide default timeout and the
  one rule by which every blocking call reads ``timeout=``;
* :mod:`~feedq._core.scope` -- closing scopes (who closes readers and
  feeders) and the current pipeline (``PipelineContext``);
* :mod:`~feedq._core.positions` -- how readers report positions in a
  resumable pipeline (filled by ``feedq._resume.report``);
* :mod:`~feedq._core.accounts` -- per-thread time accounts that queues and
  runners write and the observability package reads;
* :mod:`~feedq._core.workerinfo` -- which loader worker this code runs in;
* :mod:`~feedq._core.priority` -- the OS priority of loader threads.
"""
