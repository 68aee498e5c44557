"""Opening the next remote files ahead from a producer's hints, against the
real S3 server (moto) behind the fault proxy: no claim moves, every record
once, the round trips on the reader's path drop to none per hinted file,
and a pipeline stopped while files are being opened ahead leaves nothing
behind."""

from __future__ import annotations

import random
import threading
from concurrent.futures import wait
from pathlib import Path
from typing import Any

import pytest

import feedq
import feedq.storage as storage
from feedq.errors import CancelledError, NotFoundError, OutOfRangeError
from feedq.readers import TFRecordReader, TFRecordWriter
from feedq.storage import _prefetch
from tests.storage.conftest import Bucket
from tests.storage.faults import FaultProxy

pytestmark = pytest.mark.timeout(60)


def small_files(tmp_path: Path, s3: Bucket, n: int, per: int = 12,
                prefix: str = "p") -> tuple[list[str], set[bytes]]:
    urls: list[str] = []
    every: set[bytes] = set()
    rng = random.Random(n)
    for i in range(n):
        recs = [f"{i}:{j}:".encode() + rng.randbytes(rng.choice([0, 40, 700]))
                for j in range(per)]
        every.update(recs)
        p = tmp_path / f"{prefix}{i}.tfr"
        with TFRecordWriter(p) as w:
            w.write_many(recs)
        urls.append(s3.put(f"{prefix}/{i:03d}.tfr", p.read_bytes()))
    return urls, every


def run(urls: list[str], *, readers: int = 1, epochs: int = 1, shuffle: bool = False,
        stop_after: int | None = None) -> list[bytes]:
    got: list[bytes] = []
    with feedq.Pipeline() as pipe:
        files = feedq.string_input_producer(urls, num_epochs=epochs, shuffle=shuffle, seed=3)
        rs = [pipe.closing(TFRecordReader()) for _ in range(readers)]
        stage = feedq.batch_join([[lambda r=r: r.read_block(files, 5).values()] for r in rs], 5,
                                 enqueue_many=True, dtypes=["string"], shapes=[[]],
                                 allow_smaller_final_batch=True)
        for b in stage:
            got += list(b)
            if stop_after is not None and len(got) >= stop_after:
                break
    return got


def test_hinted_files_cost_no_round_trip_on_the_readers_path(
        tmp_path: Path, s3: Bucket, proxy: FaultProxy) -> None:
    urls, every = small_files(tmp_path, s3, 8)
    proxy.latency = 0.02
    storage.configure(prefetch_files=0)  # as before: each file an open and a GET, waited for
    storage.reset_statistics()
    got = run(urls)
    assert sorted(got) == sorted(every)
    off = storage.statistics()
    assert off["blocking_requests"] == 2 * 8 and off["opened_ahead"] == 0
    storage.configure(prefetch_files=2)
    storage.reset_statistics()
    proxy.clear()
    got = run(urls)
    assert sorted(got) == sorted(every) and len(got) == len(every)
    on = storage.statistics()
    # A remote file was opened in this process (the run above), so opening
    # ahead is on from the first hint: no request waited for from its start.
    assert on["blocking_requests"] == 0 and on["opened_ahead"] == 8
    assert on["files_opened"] == 8  # nothing opened twice, nothing opened for nothing
    heads = [s.path for s in proxy.seen if s.method == "HEAD"]
    assert len(heads) == 8 and len(set(heads)) == 8
    assert _prefetch.held() == 0  # the pipeline closed its hints


def test_readers_sharing_the_queue_get_every_record_once_over_epochs(
        tmp_path: Path, s3: Bucket, proxy: FaultProxy) -> None:
    urls, every = small_files(tmp_path, s3, 10)
    proxy.add("503", start=0, times=3)  # some first blocks (ahead or not) throttled
    proxy.add("reset", start=0, keep=20, times=2)
    storage.reset_statistics()
    got = run(urls, readers=3, epochs=2, shuffle=True)
    assert sorted(got) == sorted(list(every) * 2)  # every record twice: once per epoch
    st = storage.statistics()
    assert st["failures"] == 0 and st["retries"] == 5
    assert st["opened_ahead"] >= 10  # most of the 20 opens
    assert st["files_opened"] <= 20 + 3 * storage.options().prefetch_files
    assert _prefetch.held() == 0


def test_a_hinted_file_that_is_gone_fails_named_when_opened(
        tmp_path: Path, s3: Bucket, proxy: FaultProxy) -> None:
    urls, every = small_files(tmp_path, s3, 4)
    s3.client.delete_object(Bucket=s3.name, Key="p/002.tfr")
    got: list[bytes] = []
    with feedq.Pipeline():
        files = feedq.string_input_producer(urls, num_epochs=1, shuffle=False)
        r = TFRecordReader()
        with pytest.raises(NotFoundError, match=r"p/002\.tfr; No such file"):
            while True:
                got += r.read_up_to(files, 50)[1].tolist()
        while True:
            try:
                got += r.read_up_to(files, 50)[1].tolist()
            except OutOfRangeError:
                break
        r.close()
    assert sorted(got) == sorted(x for x in every if not x.startswith(b"2:"))


def _storage_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("feedq-storage-")]


def test_stopping_while_files_are_opened_ahead_drops_them_and_ends_the_threads(
        tmp_path: Path, s3: Bucket, proxy: FaultProxy) -> None:
    urls, every = small_files(tmp_path, s3, 12)
    storage.configure(prefetch_files=4)
    proxy.latency = 0.2  # opens ahead still in flight when the pipeline stops
    got = run(urls, stop_after=1)
    assert 1 <= len(got) < len(every) and set(got) <= every
    assert _prefetch.held() == 0
    proxy.latency = 0.0
    for t in _storage_threads():  # the idle pool: each ends 0.2 s after its last fetch
        t.join(timeout=10)
    assert not _storage_threads()


def _resumable(urls: list[str]) -> Any:
    files = feedq.string_input_producer(urls, num_epochs=1, seed=5)
    reader = TFRecordReader()
    return feedq.batch([lambda: reader.read_block(files, 4).values()], 3, enqueue_many=True,
                       dtypes=[feedq.STRING], shapes=[[]], allow_smaller_final_batch=True)


def test_a_state_taken_while_files_are_opened_ahead_resumes_exactly(
        tmp_path: Path, s3: Bucket, proxy: FaultProxy) -> None:
    urls, every = small_files(tmp_path, s3, 6, per=10)
    with feedq.Pipeline(resumable=True) as pipe:
        _resumable(urls)
        whole = [list(b) for b in pipe]
    assert sorted(x for b in whole for x in b) == sorted(every)
    storage.reset_statistics()
    with feedq.Pipeline(resumable=True) as pipe:
        _resumable(urls)
        it = iter(pipe)
        first = [list(next(it)) for _ in range(7)]  # mid-file (10 records per file)
        state = pipe.state_dict()
    assert storage.statistics()["opened_ahead"] >= 1
    with feedq.Pipeline(state=state) as pipe:
        _resumable(urls)
        rest = [list(b) for b in pipe]
    assert first + rest == whole


# ------------------------------------------------ the bounds, without a server
@pytest.fixture
def gs_files(tmp_path: Path) -> Any:
    """40 objects on ``gs://`` (a registered local filesystem), 3 opened ahead."""
    import dataclasses

    import pyarrow.fs as pafs

    (tmp_path / "bkt").mkdir()
    for i in range(40):
        (tmp_path / "bkt" / f"{i:02d}").write_bytes(bytes([i]) * 3000)
    storage.register_filesystem("gs://", pafs.SubTreeFileSystem(str(tmp_path), pafs.LocalFileSystem()))
    old = storage.configure(block_bytes=1000, read_ahead=2, prefetch_files=3)
    storage.open_remote("gs://bkt/00").close()  # a remote open: opening ahead is on
    try:
        yield [f"gs://bkt/{i:02d}" for i in range(40)]
    finally:
        # Every fetch the test started ends, and the pool's threads with it,
        # while gs:// still names the local filesystem (work still running
        # after the unregistering would reach pyarrow's real GCS client).
        from feedq.storage._remote import shared_pool
        from tests.conftest import wait_until

        pool = shared_pool()
        try:
            wait_until(lambda: pool._threads == 0, timeout=15.0,
                       what="the storage pool's threads to end after the test's fetches")
        finally:
            storage.configure(**dataclasses.asdict(old))
            storage.register_filesystem("gs://", None)


def test_files_opened_ahead_are_bounded_and_names_passed_over_are_dropped(
        gs_files: list[str]) -> None:
    hints = storage.Hints(capacity=64)
    hints.add(gs_files[1:])
    assert hints.held() == 3  # 01, 02, 03: prefetch_files, however many names
    storage.reset_statistics()
    # Readers that never take 01..19 (another process did): 17 opens pass them over.
    for name in gs_files[20:37]:
        f = storage.open_remote(name)
        assert f.read(3000) == bytes([int(name[-2:])]) * 3000
        f.close()
        assert hints.held() <= 3
    st = storage.statistics()
    # 01..03 give their room to the names after 21 once passed over twice: 20 and 21 are
    # opened on the readers' path, 22..36 had been opened ahead.
    assert st["opened_ahead"] == 17 - 2 and st["blocking_requests"] == 2 * 2
    assert [e.name for e in hints._upcoming if e.future is not None] == gs_files[37:40]
    assert all(e.name not in gs_files[1:20] for e in hints._upcoming)  # passed over: gone
    hints.close()
    assert hints.held() == 0 and not hints._upcoming


def test_only_the_last_capacity_names_hinted_before_an_epoch_are_kept(
        gs_files: list[str]) -> None:
    hints = storage.Hints(capacity=4)
    hints.add(gs_files[:30])
    hints.add(gs_files[30:])
    older = [e.name for e in hints._upcoming]
    pending = sum(len(r[0]) - r[1] for r in hints._runs)
    # At most capacity + _SLACK (8) of the first 30 can still be in the queue.
    assert len([n for n in older if n in gs_files[:30]]) <= 12
    assert gs_files[29] in older and gs_files[0] not in older
    assert pending + len(older) <= 12 + 10
    assert hints.held() <= 3
    hints.close()


def test_a_file_resumed_inside_its_first_block_uses_the_block_opened_ahead(
        gs_files: list[str]) -> None:
    hints = storage.Hints(capacity=8)
    hints.add([gs_files[5]])
    storage.reset_statistics()
    f = storage.open_remote(gs_files[5])
    f.seek(700)  # inside the first 1,000-byte block: no request for it again
    assert f.read(800) == bytes([5]) * 800
    f.close()
    st = storage.statistics()
    # Neither the open nor the first block waited for a request sent only then
    # (a seek away from the block ahead would have asked for it again).
    assert st["opened_ahead"] == 1 and st["blocking_requests"] == 0
    hints.close()


def test_hints_collected_without_close_drop_their_files(gs_files: list[str]) -> None:
    import gc

    hints = storage.Hints(capacity=8)
    hints.add(gs_files[1:4])
    storage.open_remote(gs_files[0]).close()  # an open: the window fills
    upcoming = hints._upcoming
    futures = [e.future for e in upcoming]
    assert len(futures) == 3 and all(f is not None for f in futures)
    hints.add(gs_files[4:6])  # adding and taking keep the deque the finalizer holds
    storage.open_remote(gs_files[1]).close()
    assert hints._upcoming is upcoming
    # Every open started, 04 too (started by the take above): each is waited
    # for, so none is still running when the fixture unregisters gs://.
    dropped = [e.future for e in upcoming if e.future is not None]
    assert len(dropped) == 3
    del hints
    gc.collect()
    assert not upcoming  # every file opened ahead was dropped
    done, running = wait(dropped, timeout=10)
    assert not running, "an open ahead still running after its file was dropped"
    for f in done:
        if not f.cancelled() and f.exception() is None:
            # Closed by the future's callback, which may run just after its result is set.
            assert f.result()._closed.wait(10), "a file opened ahead was left open"


def test_a_file_dropped_while_its_open_is_retried_stops_at_once(gs_files: list[str]) -> None:
    import fsspec

    entered = threading.Event()

    class Unreachable(fsspec.AbstractFileSystem):  # type: ignore[misc]
        def isfile(self, path: str) -> bool:  # pyarrow's FSSpecHandler asks this first
            entered.set()
            raise ConnectionResetError("connection reset by peer")

    storage.register_filesystem("gs://down", Unreachable())
    storage.configure(retry_budget_s=30.0, backoff_initial_s=0.01, backoff_max_s=0.02)
    try:
        storage.reset_statistics()
        hints = storage.Hints(capacity=8)
        hints.add(["gs://down/x"])
        assert entered.wait(10)  # its open ahead is being retried on the pool
        (fut,) = [e.future for e in hints._upcoming]
        assert fut is not None
        hints.close()
        # It stops at its next attempt, not after the 30 s retry budget.
        done, _ = wait([fut], timeout=5)
        assert done, "a dropped open ahead kept retrying"
        exc = fut.exception()
        assert isinstance(exc, CancelledError) and "gs://down/x" in str(exc)
        assert storage.statistics()["files_opened"] == 0 and hints.held() == 0
    finally:
        storage.register_filesystem("gs://down", None)


def test_a_dropped_file_is_not_opened_when_its_open_starts_late(gs_files: list[str]) -> None:
    from feedq.storage._remote import open_ahead

    storage.reset_statistics()
    dropped = threading.Event()
    dropped.set()  # dropped after it was queued, before a pool thread ran it
    with pytest.raises(CancelledError, match=r"gs://bkt/07"):
        open_ahead(gs_files[7], dropped)
    st = storage.statistics()
    assert st["files_opened"] == 0 and st["requests"] == 0  # not even resolved and asked
