"""Resumption: a pipeline's state as positions, saved and restored exactly.

``docs/design.md`` ("Resumption") is the guide. The modules:

* :mod:`~feedq._resume.report` -- the per-thread report of positions that
  producers and readers fill while a batcher's runner evaluates its source;
* :mod:`~feedq._resume.producer` -- the producer side: unit ids, replayable
  orders, restore plans;
* :mod:`~feedq._resume.ledger` -- the consumer side: what was delivered;
* :mod:`~feedq._resume.snaplog` -- shuffle-buffer snapshots by replay;
* :mod:`~feedq._resume.state` -- the state format, fingerprints, restore;
* :mod:`~feedq._resume.reshard` -- elastic re-sharding of rank states;
* :mod:`~feedq._resume.builds` -- the state of what a ``build`` function
  returns (process workers, ``as_torch_dataset``).
"""
