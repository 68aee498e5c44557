"""The registry: a pipeline's resumable parts and the state still to restore.

A :class:`feedq.Pipeline` owns one :class:`Registry` (``pipe.resumption``,
reached from below through ``feedq._core.scope.current_pipeline()``). The
parts built inside a resumable pipeline register here as they are built,
before their runners run:

* the producer (``feedq.input``'s ``*_input_producer``) registers its
  :class:`~feedq._resume.producer.ProducerPart` with :meth:`Registry.add_producer`
  and restores the pending state's producer part first;
* the batcher (``batch``, ``shuffle_batch``, ...) registers its
  :class:`~feedq._resume.state.BatcherPart` with :meth:`Registry.add_batcher`,
  takes the pending state and restores the rest; a process stage built
  inside a resumable pipeline takes the batcher's place (its state is the
  pipeline's).

A second producer or batcher is an error at build time: a resumable
pipeline's state is one producer's stream and one batcher's deliveries.
:meth:`Registry.state_dict` and :meth:`Registry.load_state_dict` are what
``Pipeline.state_dict`` / ``load_state_dict`` do.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from feedq._resume.producer import ProducerPart
from feedq.errors import InvalidArgumentError

__all__: list[str] = []


class Registry:
    """The resumable parts of one pipeline.

    Args:
        state: a state to restore as the parts are built (``Pipeline(state=...)``).
    """

    def __init__(self, state: dict[str, Any] | None = None) -> None:
        self._pending = state
        self._producer: ProducerPart | None = None
        # The batcher's part, or a process stage: whatever writes the state.
        self._batcher: Any = None
        # Consumers between a stage and the user (device feeders): (the stage
        # they read, how many of its evaluations the user received so far).
        self._consumers: list[tuple[Any, Callable[[], int | None]]] = []

    @property
    def pending(self) -> dict[str, Any] | None:
        """The state no batcher has taken yet (None: nothing to restore)."""
        return self._pending

    @property
    def producer(self) -> ProducerPart | None:
        """The producer's part (None if no producer was built yet)."""
        return self._producer

    @property
    def batcher(self) -> Any:
        """The batcher's part, or the process stage in its place (None: none yet)."""
        return self._batcher

    def add_producer(self, part: ProducerPart) -> dict[str, Any] | None:
        """A resumable producer was built; the state it must restore, if any.

        Raises:
            InvalidArgumentError: the pipeline already has a producer.
        """
        if self._producer is not None:
            raise InvalidArgumentError(
                "a resumable pipeline has one producer (build the others in their own pipeline)"
            )
        self._producer = part
        return self._pending

    def add_batcher(self, part: Any) -> dict[str, Any] | None:
        """A resumable batcher (or process stage) was built; the state it
        must restore, if any: it is no longer pending.

        Raises:
            InvalidArgumentError: the pipeline already has a batcher.
        """
        if self._batcher is not None:
            raise InvalidArgumentError(
                "a resumable pipeline has one batcher (build the others in their own pipeline)"
            )
        self._batcher = part
        state, self._pending = self._pending, None
        return state

    def add_consumer(self, source: Any, delivered: Callable[[], int | None]) -> None:
        """A consumer that sits between ``source`` and the user (a device
        feeder) was built: ``delivered()`` is the number of ``source``'s
        evaluations the user has received through it (None before it read
        any). Evaluations it took but did not hand on yet (prefetched,
        staged) are not delivered, so the pipeline's state counts up to it.
        """
        self._consumers.append((source, delivered))

    def state_dict(self, output: Any, upto: int | None) -> dict[str, Any]:
        """The state of the pipeline whose output is ``output``: as of
        ``upto`` evaluations, or (None) of what the user received, through
        the one consumer that reads ``output`` if there is one.

        Raises:
            InvalidArgumentError: the output is not resumable, or two
                consumers read it (save each consumer's own state).
        """
        if output is None or not hasattr(output, "state_dict"):
            raise InvalidArgumentError("this pipeline has no resumable output stage")
        if upto is None:
            readers = [delivered for source, delivered in self._consumers if source is output]
            if len(readers) > 1:
                raise InvalidArgumentError(
                    f"{len(readers)} device feeders read this pipeline's output; save each "
                    "feeder's state_dict() instead of the pipeline's")
            if readers:
                upto = readers[0]()
        state: dict[str, Any] = output.state_dict(upto)
        return state

    def load_state_dict(self, output: Any, state: dict[str, Any]) -> None:
        """Restore ``state``: now, through ``output``, when the parts are
        built; else when they are (it stays pending).

        Raises:
            InvalidArgumentError: parts were built but the output is not
                resumable, or the state is from another pipeline.
        """
        if self._batcher is None and self._producer is None:
            self._pending = state
            return
        if output is None or not hasattr(output, "load_state_dict"):
            raise InvalidArgumentError("this pipeline has no resumable output stage")
        output.load_state_dict(state)
