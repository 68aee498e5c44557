"""The :func:`process_stage` factory: the documented way to make a
:class:`~feedq.process.ProcessStage`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from feedq.process._stage import ProcessStage

__all__ = ["process_stage"]


def process_stage(
    build: Callable[[int, int], Any],
    num_processes: int = 1,
    *,
    order: str = "deterministic",
    epochs: int | None = 1,
    seed: int | None = None,
    prefetch: int | None = None,
    start_method: str | None = None,
    copy: bool = False,
    resumable: bool | None = None,
    state: dict[str, Any] | None = None,
) -> ProcessStage:
    """Run ``build``'s pipeline in worker processes; take its batches here,
    through shared memory.

    Each worker process calls ``build(worker_index, num_workers)`` inside a
    :class:`feedq.Pipeline` of its own, and iterates what it returns: a
    batch stage (``feedq.shuffle_batch(...)``...) or any iterable of batches
    (dicts, tuples or lists of NumPy arrays, bytes/str arrays,
    ``SparseTensorValue`` / ``RaggedTensorValue``). ``build`` shards the
    input itself (``feedq.distributed.shard_files(files, worker_index,
    num_workers)``); :func:`feedq.process.get_worker_info` tells it the epoch
    and the seed. Workers open their own files: nothing but ``build`` (by
    reference) is sent to them, so the first batch comes as fast whatever
    the dataset's size.

    Each worker writes batches into a ring of ``prefetch + 2`` shared-memory
    slots (sized from the first batch, grown when a batch does not fit);
    the consumer gets NumPy arrays that are views of a slot: no copy, no
    pickling. Strings travel as offsets + values (rebuilt as bytes/str
    object arrays: a copy).

    Batch lifetime (what is and is not detected): a slot is given back to its
    worker only when no array viewing it is referenced any more -- not
    merely when the next batch is taken. Slices, ``torch.from_numpy``
    tensors and anything holding an array count as references, so a batch
    kept (even ``list(stage)``) is never overwritten: the worker is given a
    new segment instead. The one thing the stage cannot see is a raw
    address (``arr.ctypes.data``, ``__array_interface__``) kept after its
    array is dropped. A slot's header carries a generation number checked at
    every take: a slot overwritten while the consumer owned it would be a
    ``DataLossError``, never silently wrong data. Pass ``copy=True`` for
    batches of private arrays (one copy; the slot goes back at once), and
    call :meth:`ProcessStage.release` to give a slot back before the next
    take.

    Args:
        build: ``build(worker_index, num_workers)``; a top-level function
            (picklable by reference) for ``spawn`` and ``forkserver``.
        num_processes: worker processes; 1 runs the whole loader in one
            subprocess, leaving this interpreter to the training loop.
        order: ``"deterministic"``: round-robin over the workers (worker 0's
            first batch, worker 1's first, ...; a worker whose epoch ended
            is skipped), so the sequence does not depend on timing when each
            worker's own sequence does not; ``"first_ready"``: batches in
            the order they are ready.
        epochs: how many times each worker builds and drains its pipeline
            (``None``: endless). One ``for`` loop over the stage is one
            epoch.
        seed: given to ``build`` through ``get_worker_info().seed``
            (``shard_seed()`` mixes in the worker and epoch).
        prefetch: batches each worker may have ready ahead of the consumer;
            ``None`` chooses from the first batch's size: about 8 MiB of
            batches, 2 to 16 of them (small batches need more in flight:
            each costs a message).
        start_method: ``"forkserver"`` (default on Linux), ``"spawn"``
            (default elsewhere), or ``"fork"`` (fast to start, but forks this
            process's threads' state: only when nothing else runs threads).
        copy: hand out private copies instead of shared-memory views.
        resumable: build each worker's pipeline in a
            ``feedq.Pipeline(resumable=True)``, so that
            :meth:`ProcessStage.state_dict` saves each worker's position
            (needed when ``build`` returns a feedq stage; a plain iterable is
            replayed instead). ``None``: as the current pipeline
            (``feedq.Pipeline(resumable=True)`` or ``state=``), whose
            ``state_dict`` / ``load_state_dict`` are then this stage's, and
            whose ``state=`` the workers start from.
        state: a :meth:`ProcessStage.state_dict` to continue from: the
            workers start restored (``load_state_dict`` after construction
            restarts them instead: one more worker start).

    Resumption: ``state = stage.state_dict()`` between batches saves the
    epoch, the merge position and each worker's pipeline state as of the
    batches this consumer took (batches in shared memory are not
    delivered); a new stage built the same way continues with
    ``stage.load_state_dict(state)`` before its first batch::

        saved = torch.load("loader.pt") if resuming else None
        stage = feedq.process_stage(build, 2, epochs=3, seed=7, resumable=True, state=saved)
        for batch in stage:
            ...
            torch.save(stage.state_dict(), "loader.pt")

    Returns:
        A :class:`ProcessStage`; inside ``with feedq.Pipeline():`` the
        pipeline closes it on exit.

    Raises:
        TypeError: ``build`` is not callable or, for spawn/forkserver, not
            picklable.
        ValueError: a bad argument.
        InvalidArgumentError: ``state`` is not a state of a stage like this one.
        UnimplementedError: no POSIX shared memory (Windows).
    """
    return ProcessStage(build, num_processes, order=order, epochs=epochs, seed=seed,
                        prefetch=prefetch, start_method=start_method, copy=copy,
                        resumable=resumable, state=state)
