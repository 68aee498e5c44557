"""Elastic resumption: re-deal the remaining work of N ranks to M ranks.

Each rank of a data-parallel job builds the same pipeline over its shard of
one global file list, ``files[rank::world]``, and saves its own state. Ranks
that took the same number of steps over shards of unequal sizes are in
different epochs, so the old ranks are first brought to one epoch boundary:
``E``, the number of epochs the furthest old rank had begun. A rank's
remaining work up to ``E`` is its units not closed (each with the records
already delivered, as ranges), the units of its current epoch its producer
has not handed out yet, and its whole epochs after that, up to epoch
``E - 1``, each in that rank's replayable ``(seed, epoch)`` order over its
own files. :func:`reshard_states` merges this work into one list of work
units (file + records to skip), deals it round robin to ``num_ranks`` new
ranks, and gives each new rank a state whose producer first does its
explicit work list, then continues with epoch ``E`` over
``files[rank::num_ranks]``, up to ``num_epochs`` in all.

Over old and new ranks every record is then delivered exactly ``num_epochs``
times (``E`` times up to the boundary, once per epoch after it); none is
delivered twice in one epoch. Orders within the work list are not the
uninterrupted run's (any mode).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from feedq._resume import positions as layout
from feedq._resume.filelist import INLINE_BYTES, FileList, list_digest, to_bytes, to_text
from feedq._resume.ledger import AnyView, pack
from feedq._resume.state import _SHARD_KEYS, FORMAT, _view, check_state
from feedq.errors import InvalidArgumentError

__all__ = ["reshard_states"]

_Work = list[tuple[bytes, "np.ndarray[Any, Any] | None"]]


def _order(seed: int, epoch: int, n: int, shuffle: bool) -> np.ndarray[Any, Any]:
    if not shuffle:
        return np.arange(n)
    return np.random.default_rng([seed, epoch]).permutation(n)


def reshard_states(
    states: list[dict[str, Any]], num_ranks: int, *, files: Sequence[Any] | None = None
) -> list[dict[str, Any]]:
    """The states of ``num_ranks`` new ranks continuing the work of ``states``.

    Args:
        states: one ``state_dict()`` per old rank, in rank order, each rank
            once; rank ``r`` read ``files[r::len(states)]`` with
            ``string_input_producer``.
        num_ranks: the new number of ranks; new rank ``r`` must build the
            same pipeline over ``files[r::num_ranks]`` and restore state
            ``r``.
        files: the global file list (optional). Given, rank ``r``'s state
            must list exactly ``files[r::len(states)]``: states in the wrong
            order or one rank's state twice are refused even when every
            shard has as many files. Without it, the order is checked by
            what the states hold: shard sizes, no file in two states, and
            the rank each state names when its files came from
            ``distributed.shard_files`` or it came from a re-sharded run.
            Needed when a state names its files by digest only (their names
            total more than 16 KiB): each rank's shard is then checked
            against the state's digest.

    Returns:
        One state per new rank (plain data, like ``state_dict()``'s).

    Raises:
        InvalidArgumentError: the states are not from one job (different
            pipelines, seeds or file lists), not in rank order, one rank's
            state twice, not from ``string_input_producer``, more new
            ranks than files, or no ``files=`` for states that name their
            files by digest only.
    """
    if isinstance(num_ranks, bool) or not isinstance(num_ranks, int) or num_ranks < 1:
        raise InvalidArgumentError(f"num_ranks must be an int >= 1, got {num_ranks!r}")
    if not states:
        raise InvalidArgumentError("reshard_states needs the state of every old rank")
    for r, st in enumerate(states):
        check_state(st, None, None)
        if st.get("inputs") is None and not isinstance(st.get("inputs_digest"), dict):
            raise InvalidArgumentError(
                "reshard_states works on pipelines fed by string_input_producer (files): "
                f"state {r} does not list its producer's inputs"
            )
    _check_family(states)
    all_files = _global_files(states, files)
    if num_ranks > len(all_files):
        raise InvalidArgumentError(
            f"{num_ranks} new ranks for {len(all_files)} files: new ranks "
            f"{len(all_files)}..{num_ranks - 1} would have no file to read"
        )
    first = states[0]["fingerprint"]
    shuffle = bool(first["producer"]["shuffle"])
    limit = first["producer"].get("num_epochs")
    ranks = []
    for r, st in enumerate(states):
        inputs = all_files[r :: len(states)]
        view, worklist = _view(st, len(inputs))
        ranks.append((st, inputs, view, worklist, math.ceil(view.next / len(inputs))))
    boundary = max(begun for *_, begun in ranks)
    if limit is not None and boundary > limit:
        raise InvalidArgumentError(
            f"a state had begun epoch {boundary - 1} of a producer of num_epochs={limit}"
        )
    work: _Work = []
    for st, inputs, view, worklist, begun in ranks:
        # Open units (any epoch) and the rest of the rank's current epoch.
        work += _rank_work(st, inputs, view, worklist, shuffle, view.next, begun, with_open=True)
    for st, inputs, view, worklist, begun in ranks:
        # Whole epochs of a lagging rank, up to the boundary.
        work += _rank_work(st, inputs, view, worklist, shuffle, begun * len(inputs), boundary,
                           with_open=False)
    seed0 = int(states[0]["producer"]["seed"])
    producer_fp = dict(first["producer"])
    for k in _SHARD_KEYS:
        producer_fp[k] = None
    out = []
    for r in range(num_ranks):
        mine = work[r::num_ranks]
        files_r = FileList([to_bytes(f) for f in all_files[r::num_ranks]])
        index, counts, ranges = [], [], []
        for i, (_, skip) in enumerate(mine):
            if skip is not None and skip.shape[0]:
                index.append(i)
                counts.append(skip.shape[0])
                ranges.append(skip.reshape(-1))
        out.append({
            "format": FORMAT,
            "fingerprint": {"batcher": dict(first["batcher"]), "producer": dict(producer_fp)},
            "elastic": True,
            "shard": {"rank": r, "world": num_ranks},
            "taken": 0,
            "producer": {"seed": seed0, "next": None, "epoch": boundary},
            "units": pack(layout.WORKLIST_BASE + np.arange(len(mine), dtype=np.int64)),
            "skips": {
                "index": pack(np.asarray(index, dtype=np.int64)),
                "counts": pack(np.asarray(counts, dtype=np.int64)),
                "ranges": pack(np.concatenate(ranges) if ranges else np.zeros(0, dtype=np.int64)),
            },
            "worklist": [to_text(v) for v, _ in mine],
            "inputs": files_r.inputs(),
            "inputs_digest": files_r.digest(),
            "exact": None,
        })
    return out


def _rank_work(st: dict[str, Any], inputs: list[str], view: AnyView, worklist: list[Any],
               shuffle: bool, start: int, epochs: int, *, with_open: bool) -> _Work:
    """One old rank's work (its files ``inputs``): its open units
    (``with_open``), then stream ordinals ``start`` up to the end of epoch
    ``epochs - 1``."""
    n = len(inputs)
    seed = int(st["producer"]["seed"])
    orders: dict[int, np.ndarray[Any, Any]] = {}

    def value(u: int) -> bytes:
        if u >= layout.WORKLIST_BASE:
            return to_bytes(worklist[u - layout.WORKLIST_BASE])  # type: ignore[no-any-return]
        epoch, pos = divmod(u, n)
        if epoch not in orders:
            orders[epoch] = _order(seed, epoch, n, shuffle)
        return to_bytes(inputs[int(orders[epoch][pos])])  # type: ignore[no-any-return]

    work: _Work = []
    if with_open:
        work += [(value(u), view.skips.get(u)) for u in view.units.tolist()]
    work += [(value(o), None) for o in range(start, epochs * n)]
    return work


def _check_family(states: list[dict[str, Any]]) -> None:
    """One job's states: same pipeline and producer (less the shard), one
    world, rank order when the states name their rank."""
    first = states[0]["fingerprint"]
    b = {k: v for k, v in first["producer"].items() if k not in _SHARD_KEYS}
    for r, st in enumerate(states[1:], 1):
        fp = st["fingerprint"]
        if fp["batcher"] != first["batcher"]:
            raise InvalidArgumentError(f"state {r}'s pipeline differs from state 0's (batcher)")
        a = {k: v for k, v in fp["producer"].items() if k not in _SHARD_KEYS}
        if a != b:
            diff = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
            raise InvalidArgumentError(
                f"state {r}'s producer differs from state 0's ({', '.join(diff)}): {a} vs {b}"
            )
    world = len(states)
    for r, st in enumerate(states):
        shard = st.get("shard")
        if shard is None:
            continue
        if int(shard["world"]) != world:
            raise InvalidArgumentError(
                f"state {r} is from a run of {shard['world']} ranks, but {world} states were given "
                "(one state per rank of one run)"
            )
        if int(shard["rank"]) != r:
            raise InvalidArgumentError(
                f"state {r} is rank {shard['rank']}'s: give the states in rank order "
                f"0..{world - 1}, each rank once"
            )


def _global_files(states: list[dict[str, Any]], files: Sequence[Any] | None) -> list[Any]:
    """The global file list the old ranks' shards come from (checked)."""
    world = len(states)
    if files is not None:
        given = [f if isinstance(f, str) else to_text(f) if isinstance(f, bytes) else str(f)
                 for f in files]
        for r, st in enumerate(states):
            if not _lists(st, given[r::world]):
                match = [s for s in range(world) if _lists(st, given[s::world])]
                why = f"it is files[{match[0]}::{world}]" if match else "it lists other files"
                raise InvalidArgumentError(
                    f"state {r} is not rank {r}'s of {world} (files[{r}::{world}]): {why}; give "
                    "the states in rank order, each rank once"
                )
        return given
    for r, st in enumerate(states):
        if st.get("inputs") is None:
            count = int(st["inputs_digest"]["count"])
            raise InvalidArgumentError(
                f"state {r} names its {count:,} files by digest only (a state lists its files "
                f"only while their names total at most {INLINE_BYTES // 1024} KiB): pass files=, "
                "the global file list, to reshard_states"
            )
    total = sum(len(st["inputs"]) for st in states)
    owner: dict[str, int] = {}
    for r, st in enumerate(states):
        if len(range(r, total, world)) != len(st["inputs"]):
            raise InvalidArgumentError(
                f"state {r} has {len(st['inputs'])} files: not files[{r}::{world}] of {total} "
                f"(states in the wrong rank order, or one rank's state twice?)"
            )
        for f in st["inputs"]:
            s = owner.setdefault(f, r)
            if s != r:
                same = list(states[s]["inputs"]) == list(st["inputs"])
                raise InvalidArgumentError(
                    f"states {s} and {r} both read {f!r}: "
                    + ("the same rank's state twice?" if same else "not shards of one file list")
                    + " (pass files= when the list really repeats a file)"
                )
    out: list[Any] = [None] * total
    for r, st in enumerate(states):
        out[r::world] = st["inputs"]
    return out


def _lists(state: dict[str, Any], shard: list[str]) -> bool:
    """Whether ``state``'s producer read exactly ``shard`` (by its names,
    or by its digest when it holds none)."""
    if state.get("inputs") is not None:
        return list(state["inputs"]) == shard
    digest = state["inputs_digest"]
    return int(digest["count"]) == len(shard) and digest["sha256"] == list_digest(shard)[0]
