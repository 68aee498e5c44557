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

from feedq.errors import InvalidArgumentError

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

    Make it with :meth:`prepare` (before the pipeline starts), iterate it
    with :meth:`iterate` (after); :meth:`state` is the saved position once
    the first ``n`` batches its iterator gave (after the skipped ones) are
    delivered.
    """

    __slots__ = ("out", "stateful", "base", "skip", "where")

    def __init__(self, out: Any, stateful: bool, base: int, skip: int) -> None:
        self.out = out
        self.stateful = stateful
        self.base = base  # out.taken when its iterator gave its first batch
        self.skip = skip  # batches replayed and skipped
        self.where = ""  # for errors: which worker and epoch

    @classmethod
    def prepare(cls, out: Any, resume: dict[str, Any] | None, where: str) -> Built:
        """Restore ``out`` to ``resume`` (None: from the start); call it
        before the pipeline's runners start (a stage loads its state then),
        and :meth:`iterate` after.

        Raises:
            InvalidArgumentError: ``resume`` is not a saved position, or holds
                a stage's state but ``out`` is a plain iterable.
            Exception: what the stage's ``load_state_dict`` raises.
        """
        stateful = is_stateful(out)
        skip = 0
        if resume is not None:
            if not check_state(resume):
                raise InvalidArgumentError(f"{where}: not a saved pipeline position: {resume!r}")
            if resume[MODE] == MODE_STATE:
                if not stateful:
                    raise InvalidArgumentError(
                        f"{where}: the saved state holds a pipeline stage's state, but build() "
                        f"returned {type(out).__name__}, which has no load_state_dict: build "
                        "the same pipeline")
                out.load_state_dict(resume[STATE])
            else:
                skip = resume[SKIP]
        built = cls(out, stateful, 0, skip)
        built.where = where
        return built

    def iterate(self, iterate: Callable[[Any], Iterator[Any]]) -> Iterator[Any]:
        """The output's iterator, past the batches a replay skips (the
        pipeline runs by now).

        Raises:
            InvalidArgumentError: replaying gave fewer batches than the
                state counts as delivered (another pipeline).
        """
        it = iterate(self.out)
        for done in range(self.skip):
            try:
                next(it)
            except StopIteration:
                raise InvalidArgumentError(
                    f"{self.where}: the saved state counts {self.skip} batches delivered, but "
                    f"build() gave only {done} when replayed: build the same pipeline"
                ) from None
        if self.stateful:
            self.base = int(getattr(self.out, "taken", 0))
        return it

    def state(self, n: int) -> dict[str, Any]:
        """The position once the first ``n`` batches given are delivered."""
        if self.stateful:
            return {MODE: MODE_STATE, STATE: self.out.state_dict(upto=self.base + n)}
        return {MODE: MODE_REPLAY, SKIP: self.skip + n}
