"""Resumption: a pipeline's state as positions, saved and restored exactly.

``docs/resume.md`` is the guide: the words (unit, unit code, position,
report, part, ledger, snapshot log, restore plan, state, registry), the
modules and the seams. The modules, from the ground up:

* :mod:`~feedq._resume.positions` -- the position layout
  (``unit << 32 | record``) and the filter of a re-read unit;
* :mod:`~feedq._resume.report` -- the per-thread report that producer
  stages and readers fill while a batcher's runner evaluates its source
  (readers reach it only through ``feedq._core.positions``);
* :mod:`~feedq._resume.producer` -- the producer's part: unit codes,
  replayable orders, the restore plan;
* :mod:`~feedq._resume.ledger` -- what was delivered, by ticket;
* :mod:`~feedq._resume.snapshot_log` -- shuffle-buffer snapshots from
  checkpoints and a replay log;
* :mod:`~feedq._resume.filelist` -- a file producer's list as a state
  names it (a digest and chunk table, the names only while small);
* :mod:`~feedq._resume.state` -- the state format and fingerprints, the
  batcher's part, the producer's restore;
* :mod:`~feedq._resume.registry` -- the pipeline's resumable parts and the
  state still to restore (``Pipeline.resumption``);
* :mod:`~feedq._resume.reshard` -- elastic re-sharding of rank states;
* :mod:`~feedq._resume.builds` -- the saved position of what a ``build``
  function returns (process workers, ``as_torch_dataset``).

The seams: the pipeline owns the registry; a producer and then a batcher
built inside a resumable pipeline register their parts with it and are
built with them (``Stage(..., resumption=part)``); readers report positions
through ``feedq._core.positions``; the batcher's shuffle buffer (in
``feedq.input``) is seen through the ``Shuffled`` protocol. Nothing here
imports ``feedq.input`` or ``feedq.pipeline``.
"""
