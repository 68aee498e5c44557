"""Pipelines, data, the save/restore harness and the training child of the
resumption tests.

The harness (STYLE.md 10): :func:`run_to` builds a pipeline in
``feedq.Pipeline(resumable=True, state=...)``, takes batches up to a stop
point and saves; :func:`save_restore` does that at each stop point of a
list, restores each saved state in a new pipeline and gives the pieces;
:func:`check_save_restore` asserts that the batches before and after each
stop are the uninterrupted run's.

Run as a script (``python tests/resume/_support.py CONFIG.json``) it is the
"training process" the SIGKILL tests kill: it builds the pipeline, consumes
batches and, after each one, atomically writes ``b<index>.pkl`` holding the
batch's record ids, its tags and ``pipe.state_dict()``. With ``pause_at`` it
blocks after writing that batch (runner threads keep filling the queues and
the shuffle buffer) until the parent kills it.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

if __name__ == "__main__":  # run from the repo root as a script
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import feedq
from feedq.readers import (
    FixedLenFeature,
    TextLineReader,
    TFRecordReader,
    decode_csv,
    parse_example,
)

FORMATS = ("csv", "tfrecord", "tfrecord_gzip", "memory")
BATCH = 16
CAPACITY = 200
MIN_AFTER = 100


def _example(rid: int, tag: bytes) -> bytes:
    from feedq.cli.datasets import _bytes_feature, _example, _int64_feature

    return _example([(b"id", _int64_feature([rid])), (b"tag", _bytes_feature([tag]))])


def write_data(folder: Path, fmt: str, files: int = 6, seed: int = 0) -> dict[str, Any]:
    """Files (or arrays) of records with ids 0..total-1 and tags of varying length."""
    from feedq.cli.datasets import _compress, _tfrecord_bytes

    rng = np.random.default_rng(seed)
    sizes = rng.integers(40, 121, files)
    if int(sizes.sum()) % BATCH == 0:
        sizes[0] += 5  # a partial final batch
    total = int(sizes.sum())
    tags = [b"t" * int(k) + b"%d" % i for i, k in enumerate(rng.integers(0, 30, total))]
    if fmt == "memory":
        return {"fmt": fmt, "total": total, "paths": []}
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    start = 0
    for f, n in enumerate(sizes.tolist()):
        ids = range(start, start + n)
        if fmt == "csv":
            path = folder / f"part-{f:02d}.csv"
            path.write_text("".join(f"{i},{tags[i].decode()}\n" for i in ids))
        else:
            path = folder / f"part-{f:02d}.tfrecord"
            data = _tfrecord_bytes([_example(i, tags[i]) for i in ids])
            path.write_bytes(_compress(data, "GZIP" if fmt == "tfrecord_gzip" else None))
        paths.append(str(path))
        start += n
    return {"fmt": fmt, "total": total, "paths": paths}


def _memory_arrays(total: int) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    ids = np.arange(total, dtype=np.int64)
    x = (ids[:, None] * np.arange(1, 4)).astype(np.float32)
    return ids, x


def build(pipe: feedq.Pipeline, data: dict[str, Any], mode: str, epochs: int) -> feedq.Stage:
    """The pipeline under test; ``mode``: ``exact`` (shuffle_batch, one
    thread), ``fifo`` (batch, one thread) or ``threads`` (3 readers)."""
    fmt = data["fmt"]
    if fmt == "memory":
        ids, x = _memory_arrays(data["total"])
        prod = feedq.slice_input_producer([ids, x], num_epochs=epochs, seed=3)
        if mode == "fifo":
            return feedq.batch(prod, BATCH, allow_smaller_final_batch=True)
        return feedq.shuffle_batch(prod, BATCH, CAPACITY, MIN_AFTER, seed=7,
                                   num_threads=3 if mode == "threads" else 1,
                                   allow_smaller_final_batch=True)
    files = feedq.string_input_producer(data["paths"], num_epochs=epochs, seed=11)
    n_readers = 3 if mode == "threads" else 1
    if fmt == "csv":
        readers: list[Any] = [pipe.closing(TextLineReader()) for _ in range(n_readers)]

        def read(r: Any) -> list[Any]:
            i, tag = decode_csv(r.read_block(files, 24), record_defaults=[[0], [""]])
            return [i.astype(np.int64), tag]
    else:
        opts = "GZIP" if fmt == "tfrecord_gzip" else None
        readers = [pipe.closing(TFRecordReader(options=opts)) for _ in range(n_readers)]
        spec = {"id": FixedLenFeature([], np.int64), "tag": FixedLenFeature([], np.bytes_)}

        def read(r: Any) -> list[Any]:
            got = parse_example(r.read_block(files, 24), spec)
            return [got["id"], got["tag"]]

    kw: dict[str, Any] = dict(enqueue_many=True, dtypes=[np.int64, feedq.STRING], shapes=[[], []],
                              allow_smaller_final_batch=True)
    if mode == "threads":
        return feedq.shuffle_batch_join([lambda r=r: read(r) for r in readers], BATCH, CAPACITY,
                                        MIN_AFTER, seed=7, **kw)
    if mode == "fifo":
        return feedq.batch(lambda: read(readers[0]), BATCH, **kw)
    return feedq.shuffle_batch(lambda: read(readers[0]), BATCH, CAPACITY, MIN_AFTER, seed=7, **kw)


def as_arrays(batch: Any) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """(record ids, the other component) of a batch."""
    ids, other = batch
    return np.asarray(ids).copy(), np.asarray(other).copy()


# -- the save/restore harness ----------------------------------------------------------

Build = Callable[[feedq.Pipeline], Any]


@dataclass(frozen=True)
class Subject:
    """Something the harness saves and restores (a pipeline, a process stage).

    Attributes:
        open: a context manager over a new instance, restored from the
            given state (None: from the start) before anything runs.
        take: up to ``n`` batches from an open instance (None: to the end),
            each as the test compares them (copies).
        save: an open instance's state as of its first ``upto`` batches.
    """

    open: Callable[[dict[str, Any] | None], AbstractContextManager[Any]]
    take: Callable[[Any, int | None], list[Any]]
    save: Callable[[Any, int], dict[str, Any]]


def pipeline(build: Build, key: Callable[[Any], Any] = as_arrays) -> Subject:
    """``build`` inside ``feedq.Pipeline(resumable=True, state=...)``; its
    batches as ``key`` gives them."""

    @contextlib.contextmanager
    def open_(state: dict[str, Any] | None) -> Iterator[feedq.Pipeline]:
        with feedq.Pipeline(resumable=True, state=state) as pipe:
            build(pipe)
            yield pipe

    def take(pipe: feedq.Pipeline, n: int | None) -> list[Any]:
        got: list[Any] = []
        batches = iter(pipe)
        while n is None or len(got) < n:
            batch = next(batches, None)
            if batch is None:
                break
            got.append(key(batch))
        return got

    return Subject(open_, take, lambda pipe, upto: pipe.state_dict(upto=upto))


def _subject(what: Build | Subject, key: Callable[[Any], Any]) -> Subject:
    return what if isinstance(what, Subject) else pipeline(what, key)


def run_to(what: Build | Subject, state: dict[str, Any] | None = None, stop: int | None = None,
           key: Callable[[Any], Any] = as_arrays, upto: int | None = None,
           ) -> tuple[list[Any], dict[str, Any]]:
    """Open ``what`` (a :class:`Subject`, or a build function of a pipeline
    whose batches ``key`` maps) restored from ``state``, take ``stop``
    batches (None: all of them), and save: the batches and the state as of
    batch ``upto`` (default: all taken), after a pickle round trip (what a
    checkpoint file holds)."""
    subject = _subject(what, key)
    with subject.open(state) as run:
        got = subject.take(run, stop)
        saved = subject.save(run, len(got) if upto is None else upto)
    return got, pickle.loads(pickle.dumps(saved))


def same(a: list[Any], b: list[Any]) -> bool:
    """Whether two runs' batches are equal, batch by batch (a batch: an
    array, or a tuple of arrays)."""
    def equal(x: Any, y: Any) -> bool:
        if isinstance(x, tuple):
            return isinstance(y, tuple) and len(x) == len(y) and all(
                np.array_equal(p, q) for p, q in zip(x, y))
        return bool(np.array_equal(x, y))

    return len(a) == len(b) and all(equal(x, y) for x, y in zip(a, b))


@dataclass
class Resumed:
    """One stop point of :func:`save_restore`.

    Attributes:
        stop: batches counted as delivered when the state was saved.
        before: the batches the saving run took (``stop + ahead`` of them).
        state: the state saved as of ``stop``.
        after: what a new instance restored from ``state`` delivered.
    """

    stop: int
    before: list[Any]
    state: dict[str, Any]
    after: list[Any]


def save_restore(what: Build | Subject, stops: Iterable[int],
                 key: Callable[[Any], Any] = as_arrays, ahead: int = 0) -> Iterator[Resumed]:
    """At each stop point ``k``: run ``k + ahead`` batches and save the state
    as of batch ``k`` (the ``ahead`` ones count as not delivered, as a
    prefetcher's), then restore it in a new instance and run that to the end."""
    subject = _subject(what, key)
    for k in stops:
        before, state = run_to(subject, None, k + ahead, upto=k)
        after, _ = run_to(subject, state, None)
        yield Resumed(k, before, state, after)


def check_save_restore(what: Build | Subject, stops: Iterable[int],
                       key: Callable[[Any], Any] = as_arrays, full: list[Any] | None = None,
                       ) -> None:
    """Stopped and restored at each of ``stops``: the batches before and
    after are the uninterrupted run's (``full``, run here if not given)."""
    subject = _subject(what, key)
    if full is None:
        full, _ = run_to(subject, None, None)
    for r in save_restore(subject, stops):
        assert same(r.before + r.after, full), r.stop


def run(data: dict[str, Any], mode: str, epochs: int, state: dict[str, Any] | None = None,
        out: Path | None = None, first: int = 0, pause_at: int = -1,
        slow: float = 0.0) -> list[tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]]:
    """Consume the pipeline (from ``state``); with ``out``, write each batch
    and the state after it (atomically) as ``b<first + i>.pkl``."""
    got = []
    with feedq.Pipeline(resumable=True, state=state) as pipe:
        build(pipe, data, mode, epochs)
        for i, batch in enumerate(pipe):
            arrays = as_arrays(batch)
            got.append(arrays)
            if out is not None:
                blob = pickle.dumps({"ids": arrays[0], "other": arrays[1],
                                     "state": pipe.state_dict()})
                tmp = out / f".b{first + i:05d}.tmp"
                tmp.write_bytes(blob)
                os.replace(tmp, out / f"b{first + i:05d}.pkl")
                if first + i == pause_at:
                    sys.stdin.read()  # blocked until the parent kills us
            if slow:
                time.sleep(slow)
    return got


def main() -> None:
    cfg = json.loads(Path(sys.argv[1]).read_text())
    run(cfg["data"], cfg["mode"], cfg["epochs"], out=Path(cfg["out"]), pause_at=cfg["pause_at"],
        slow=cfg.get("slow", 0.0))
    if cfg.get("hold", False):
        sys.stdin.read()  # a child to be killed while running never ends on its own


if __name__ == "__main__":
    main()
