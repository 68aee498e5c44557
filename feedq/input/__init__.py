"""Input producers and batching (TF1 ``tf.train.*_input_producer``, ``batch``,
``shuffle_batch`` and friends; spec sections 8 and 9, rules IP1–IP6, B1–B13).

Every function builds a queue and one :class:`~feedq.runners.QueueRunner`
that fills it, registers the runner (with the current
:class:`~feedq.Pipeline`, else the default collection for
:func:`feedq.start_queue_runners`) and returns a :class:`Stage`: the
queue, its runner, and how to take from it. A stage is what TF1 returned as
a tensor: evaluate it with ``stage.dequeue(timeout=...)`` (``OutOfRangeError``
at the end of data) or iterate it (``StopIteration`` at the end).

What can be batched (the ``tensors`` argument): a stage (its evaluations
are the elements), a callable taking no arguments (each call returns one
element, or one batch with ``enqueue_many=True``), or a list or dict whose
entries are stages, callables or constant arrays (each entry gives one
component per step). A callable needs ``dtypes=`` (and ``shapes=``, B3)
since feedq will not run it to find out.

Batch-first: a stage of single elements (a producer) feeding a batcher is
read in blocks of up to ``batch_size`` (``dequeue_up_to``), which gives the
same elements in the same order as one-at-a-time reads, without a Python
call per element.

Where feedq differs from TF1:

* X1: evaluating a stage whose runner (or an upstream runner) was never
  started raises ``FailedPreconditionError`` naming it, instead of hanging.
* X2/IP6: epoch counters are plain Python state; no initializer step.
* X3: a runner's exception reaches the consumer: the stage re-raises it
  (with the runner thread's traceback) instead of ending the data.
* X4: elements dropped at the end by ``allow_smaller_final_batch=False``
  are counted in ``stage.statistics().dropped``.
* X12/B5: ``shuffle_batch(..., seed=s, num_threads=1)`` is reproducible:
  the shuffling is done by the runner thread (a RandomShuffleQueue it
  alone reads) in fixed-size draws, so consumer timing cannot change the
  order. The stage's queue is a FIFO of shuffled elements; ``capacity``
  bounds it and the shuffle buffer together (plus one batch in flight).

Layout (one idea per private module; import from ``feedq.input`` or
``feedq``): ``_stage`` (Stage and its statistics), ``_producers``
(``limit_epochs`` and the input producers), ``_sources`` (what a batcher
evaluates, ``keep_input``), ``_shuffle`` (the shuffle buffer of the
shuffling batchers), ``_batching`` (the batchers). Resumption
(``Pipeline(resumable=True)``, ``Stage.state_dict``) lives in
``feedq._resume`` (guide: ``docs/resume.md``): a resumable producer or
batcher registers its part with the pipeline's registry and builds its
stage with it; :func:`reshard_states` is ``feedq._resume.reshard``'s.
"""

from __future__ import annotations

from feedq._resume.reshard import reshard_states
from feedq.input._batching import (
    batch,
    batch_join,
    maybe_batch,
    maybe_batch_join,
    maybe_shuffle_batch,
    maybe_shuffle_batch_join,
    shuffle_batch,
    shuffle_batch_join,
)
from feedq.input._producers import (
    input_producer,
    limit_epochs,
    match_filenames_once,
    range_input_producer,
    slice_input_producer,
    string_input_producer,
)
from feedq.input._stage import Stage, StageStatistics

__all__ = [
    "Stage",
    "StageStatistics",
    "batch",
    "batch_join",
    "input_producer",
    "limit_epochs",
    "match_filenames_once",
    "maybe_batch",
    "maybe_batch_join",
    "maybe_shuffle_batch",
    "maybe_shuffle_batch_join",
    "range_input_producer",
    "reshard_states",
    "shuffle_batch",
    "shuffle_batch_join",
    "slice_input_producer",
    "string_input_producer",
]

# The public path, not the private module, in reprs, docs and pickles.
for _name in __all__:
    globals()[_name].__module__ = __name__
del _name
