"""Elastic resumption: re-deal the remaining work of N ranks to M ranks.

Each rank of a data-parallel job builds the same pipeline over its shard of
one global file list, ``files[rank::world]``, and saves its own state. A
rank's remaining work in its current epoch is its units not closed (each
with the records already delivered, as ranges) and the units its producer
has not handed out yet in that epoch. :func:`reshard_states` merges these
into one list of work units (file + records to skip), deals them round
robin to ``num_ranks`` new ranks, and gives each new rank a state whose
producer first does its explicit work list, then continues with the epoch
after the newest epoch any old rank had begun, over ``files[rank::num_ranks]``.

Every record of the interrupted epoch(s) not yet delivered is then
delivered exactly once across the new ranks; none that was is delivered
again. Orders within the work list are not the uninterrupted run's (any
mode).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .. import _provenance as prov
from ..errors import InvalidArgumentError
from ._ledger import pack
from ._resume import _SHARD_KEYS, FORMAT, _view, check_state, to_bytes, to_text

__all__ = ["reshard_states"]


def _order(seed: int, epoch: int, n: int, shuffle: bool) -> np.ndarray[Any, Any]:
    if not shuffle:
        return np.arange(n)
    return np.random.default_rng([seed, epoch]).permutation(n)


def reshard_states(states: list[dict[str, Any]], num_ranks: int) -> list[dict[str, Any]]:
    """The states of ``num_ranks`` new ranks continuing the epoch of ``states``.

    Args:
        states: one ``state_dict()`` per old rank, rank order; rank ``r``
            read ``files[r::len(states)]`` with ``string_input_producer``.
        num_ranks: the new number of ranks; new rank ``r`` must build the
            same pipeline over ``files[r::num_ranks]`` and restore state
            ``r``.

    Returns:
        One state per new rank (plain data, like ``state_dict()``'s).

    Raises:
        InvalidArgumentError: the states are not from one job (different
            pipelines or file lists), or not from ``string_input_producer``.
    """
    if isinstance(num_ranks, bool) or not isinstance(num_ranks, int) or num_ranks < 1:
        raise InvalidArgumentError(f"num_ranks must be an int >= 1, got {num_ranks!r}")
    if not states:
        raise InvalidArgumentError("reshard_states needs the state of every old rank")
    for st in states:
        check_state(st, None, None)
        if st.get("inputs") is None:
            raise InvalidArgumentError(
                "reshard_states works on pipelines fed by string_input_producer (files): "
                "the state does not list its producer's inputs"
            )
    first = states[0]["fingerprint"]
    for r, st in enumerate(states[1:], 1):
        fp = st["fingerprint"]
        if fp["batcher"] != first["batcher"]:
            raise InvalidArgumentError(f"rank {r}'s pipeline differs from rank 0's (batcher)")
        a = {k: v for k, v in fp["producer"].items() if k not in _SHARD_KEYS}
        b = {k: v for k, v in first["producer"].items() if k not in _SHARD_KEYS}
        if a != b:
            raise InvalidArgumentError(f"rank {r}'s producer differs from rank 0's: {a} vs {b}")
    world = len(states)
    total = sum(len(st["inputs"]) for st in states)
    files: list[Any] = [None] * total
    for r, st in enumerate(states):
        if len(range(r, total, world)) != len(st["inputs"]):
            raise InvalidArgumentError(
                f"rank {r} has {len(st['inputs'])} files: not files[{r}::{world}] of {total}"
            )
        files[r::world] = st["inputs"]
    shuffle = bool(first["producer"]["shuffle"])
    work: list[tuple[bytes, np.ndarray[Any, Any] | None]] = []
    next_epoch = 0
    for st in states:
        inputs = st["inputs"]
        n = len(inputs)
        seed = int(st["producer"]["seed"])
        view, worklist = _view(st, n)
        orders: dict[int, np.ndarray[Any, Any]] = {}

        def value(u: int, inputs: list[Any] = inputs, seed: int = seed, n: int = n,
                  orders: dict[int, np.ndarray[Any, Any]] = orders,
                  worklist: list[Any] = worklist) -> bytes:
            if u >= prov.WORKLIST_BASE:
                return to_bytes(worklist[u - prov.WORKLIST_BASE])  # type: ignore[no-any-return]
            epoch, pos = divmod(u, n)
            if epoch not in orders:
                orders[epoch] = _order(seed, epoch, n, shuffle)
            return to_bytes(inputs[int(orders[epoch][pos])])  # type: ignore[no-any-return]

        for u in view.units.tolist():
            work.append((value(u), view.skips.get(u)))
        begun = math.ceil(view.next / n) if n else 0
        for o in range(view.next, begun * n):
            work.append((value(o), None))
        next_epoch = max(next_epoch, begun, int(st["producer"].get("epoch") or 0))
    out = []
    seed0 = int(states[0]["producer"]["seed"])
    for r in range(num_ranks):
        mine = work[r::num_ranks]
        index, counts, ranges = [], [], []
        for i, (_, skip) in enumerate(mine):
            if skip is not None and skip.shape[0]:
                index.append(i)
                counts.append(skip.shape[0])
                ranges.append(skip.reshape(-1))
        producer_fp = dict(first["producer"])
        for k in _SHARD_KEYS:
            producer_fp[k] = None
        out.append({
            "format": FORMAT,
            "fingerprint": {"batcher": dict(first["batcher"]), "producer": producer_fp},
            "elastic": True,
            "taken": 0,
            "producer": {"seed": seed0, "next": None, "epoch": next_epoch},
            "units": pack(prov.WORKLIST_BASE + np.arange(len(mine), dtype=np.int64)),
            "skips": {
                "index": pack(np.asarray(index, dtype=np.int64)),
                "counts": pack(np.asarray(counts, dtype=np.int64)),
                "ranges": pack(np.concatenate(ranges) if ranges else np.zeros(0, dtype=np.int64)),
            },
            "worklist": [to_text(v) for v, _ in mine],
            "inputs": list(files[r::num_ranks]),
            "exact": None,
        })
    return out
