"""Process stages: pipelines built in worker processes, batches handed back
through shared memory.

Threads share one interpreter with the training loop; per-record Python work
(augmentation, tokenisation) in a threaded pipeline takes its time from the
model. A process stage moves the whole pipeline into worker processes: each
calls ``build(worker_index, num_workers)``, which builds an ordinary feedq
pipeline and returns its batch stage, and the consumer takes the batches as
NumPy views of shared memory::

    def build(worker_index, num_workers):
        files = feedq.distributed.shard_files(FILES, worker_index, num_workers)
        ...                                     # readers, decoders, shuffle_batch
        return batches

    with feedq.Pipeline():
        stage = feedq.process_stage(build, num_processes=2, epochs=3, seed=7)
        for epoch in range(3):
            for batch in stage:                 # one epoch
                train_step(batch)
            evaluate()

Layers: this package sits above ``feedq.input`` and ``feedq.pipeline`` (a
worker builds its pipeline with them) and below ``feedq.distributed``.
Modules: ``_shm`` (segments, names, the sweep of a dead run's segments),
``_layout`` (a batch's columnar layout in a slot), ``_worker`` (the worker
process); the consumer side: ``_stage`` (the :class:`ProcessStage` class),
which owns one object per thing it keeps: ``_messages`` (the
``WorkerChannel``: worker handles, pipes, inboxes), ``_slots`` (the
``SlotRing``: batch lifetime, giving slots back), ``_order`` (the
``MergeOrder``: epochs, merge order) and ``_state`` (``Positions``: what
``state_dict`` / ``load_state_dict`` work from); ``_launch`` (start methods,
argument checks, starting and stopping processes), ``_failures`` (worker
failures as exceptions); ``_factory`` (:func:`process_stage`).
"""

from __future__ import annotations

from feedq._core.workerinfo import WorkerInfo, get_worker_info
from feedq.process._factory import process_stage
from feedq.process._failures import WorkerTraceback
from feedq.process._launch import default_start_method, warm_up
from feedq.process._stage import ProcessStage, ProcessStageStatistics

__all__ = [
    "ProcessStage",
    "ProcessStageStatistics",
    "WorkerInfo",
    "WorkerTraceback",
    "default_start_method",
    "get_worker_info",
    "process_stage",
    "warm_up",
]

for _name in ("ProcessStage", "ProcessStageStatistics", "WorkerTraceback", "WorkerInfo"):
    globals()[_name].__module__ = __name__
del _name
