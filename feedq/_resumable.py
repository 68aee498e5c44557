"""Saving and restoring the position in what a ``build(worker_index,
num_workers)`` function returns: shared by process-stage workers and
``as_torch_dataset(build)``.

A build output that is resumable (a feedq stage: ``state_dict(upto=)``,
``load_state_dict``, ``taken``) saves its own state. A plain iterable (a
generator) cannot: it is restored by *replay* -- build it again, iterate it
from the start and skip the batches already delivered -- which is exact when
the iterable makes the same batches each time it is built (seeded), and
costs the time to make them again.

The saved form is plain data: ``{"mode": "state", "state": <the stage's
state>}`` or ``{"mode": "replay", "skip": <batches delivered>}``.

This module imports nothing of feedq but its errors (it sits below the
device adapters and the process stages).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from .errors import InvalidArgumentError

__all__ = ["MODE", "MODE_REPLAY", "MODE_STATE", "SKIP", "STATE", "Built", "check_state",
           "fresh_state", "is_stateful", "iterate_output"]

#: Keys and values of a build output's saved position.
MODE = "mode"
MODE_STATE = "state"  # the output's own state_dict()
MODE_REPLAY = "replay"  # a plain iterable: build again, skip SKIP batches
STATE = "state"
SKIP = "skip"


def fresh_state() -> dict[str, Any]:
    """The position at the start of an epoch (nothing delivered)."""
    return {MODE: MODE_REPLAY, SKIP: 0}


def is_stateful(out: Any) -> bool:
    """Whether a build output saves and restores its own position."""
    return callable(getattr(out, "state_dict", None)) and callable(
        getattr(out, "load_state_dict", None))


def iterate_output(out: Any, index: int, num_workers: int) -> Iterator[Any]:
    """``iter(out)`` for ``out = build(index, num_workers)``, or a TypeError
    that says what build must return."""
    try:
        return iter(out)
    except TypeError:
        raise TypeError(
            f"build({index}, {num_workers}) returned {type(out).__name__}: it must return a "
            "batch stage or an iterable of batches"
        ) from None


def check_state(state: Any) -> bool:
    """Whether ``state`` has the form of a saved position."""
    if not isinstance(state, dict):
        return False
    if state.get(MODE) == MODE_STATE:
        return STATE in state
    skip = state.get(SKIP)
    return (state.get(MODE) == MODE_REPLAY and isinstance(skip, int)
            and not isinstance(skip, bool) and skip >= 0)


class Built:
    """One build output being iterated, and where its batch numbering starts.

    Make it with :meth:`start`; :meth:`state` is the saved position once the
    first ``n`` batches its iterator gave are delivered.
    """

    __slots__ = ("out", "stateful", "base", "skip")

    def __init__(self, out: Any, stateful: bool, base: int, skip: int) -> None:
        self.out = out
        self.stateful = stateful
        self.base = base  # out.taken when its iterator gave its first batch
        self.skip = skip  # batches replayed and skipped (plain iterables)

    @classmethod
    def start(cls, out: Any, resume: dict[str, Any] | None, where: str,
              iterate: Callable[[Any], Iterator[Any]]) -> tuple[Built, Iterator[Any]]:
        """Restore ``out`` to ``resume`` (None: from the start) and iterate it.

        Raises:
            InvalidArgumentError: ``resume`` is not a saved position, holds a
                stage's state but ``out`` is a plain iterable, or counts more
                batches than replaying ``out`` gives (another pipeline).
        """
        stateful = is_stateful(out)
        skip = 0
        if resume is None:
            it = iterate(out)
        elif not check_state(resume):
            raise InvalidArgumentError(f"{where}: not a saved pipeline position: {resume!r}")
        elif resume[MODE] == MODE_STATE:
            if not stateful:
                raise InvalidArgumentError(
                    f"{where}: the saved state holds a pipeline stage's state, but build() "
                    f"returned {type(out).__name__}, which has no load_state_dict: build the "
                    "same pipeline")
            out.load_state_dict(resume[STATE])
            it = iterate(out)
        else:
            skip = resume[SKIP]
            it = iterate(out)
            for done in range(skip):
                try:
                    next(it)
                except StopIteration:
                    raise InvalidArgumentError(
                        f"{where}: the saved state counts {skip} batches delivered, but "
                        f"build() gave only {done} when replayed: build the same pipeline"
                    ) from None
        base = int(getattr(out, "taken", 0)) if stateful else 0
        return cls(out, stateful, base, skip), it

    def state(self, n: int) -> dict[str, Any]:
        """The position once the first ``n`` batches given are delivered."""
        if self.stateful:
            return {MODE: MODE_STATE, STATE: self.out.state_dict(upto=self.base + n)}
        return {MODE: MODE_REPLAY, SKIP: self.skip + n}
