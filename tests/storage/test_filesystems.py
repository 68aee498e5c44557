"""The filesystem seam without a server: URLs, credentials, error mapping,
registered pyarrow filesystems (how gs://, hdfs://, abfs:// are served: the
same seam), the fsspec fallback, settings and statistics."""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow.fs as pafs
import pytest

import feedq
import feedq.storage as storage
from feedq.errors import (
    DataLossError,
    InvalidArgumentError,
    MissingExtraError,
    NotFoundError,
    OutOfRangeError,
    PermissionDeniedError,
    UnavailableError,
)
from feedq.queues import FIFOQueue
from feedq.readers import TextLineReader, TFRecordReader, TFRecordWriter
from feedq.storage import _filesystems

pytestmark = pytest.mark.timeout(20)


def closed_queue(*names: str) -> FIFOQueue:
    q = FIFOQueue(capacity=-1, dtypes=["string"], shapes=[[]])
    q.enqueue_many([list(names)])
    q.close()
    return q


@pytest.fixture
def small_blocks() -> Iterator[None]:
    old = storage.configure(block_bytes=1000, read_ahead=2, retry_budget_s=0.2,
                            backoff_initial_s=0.001, backoff_max_s=0.01)
    storage.reset_statistics()
    try:
        yield
    finally:
        storage.configure(**dataclasses.asdict(old))


def test_which_names_are_remote() -> None:
    assert storage.is_remote("s3://b/k") and storage.is_remote(b"gs://b/k")
    assert storage.is_remote("hdfs://nn:8020/x") and storage.is_remote("memory://x")
    assert not storage.is_remote("/tmp/x") and not storage.is_remote("rel/x.tfr")
    assert not storage.is_remote("file:///tmp/x") and not storage.is_remote("C:/x")
    assert storage.local_path("file:///tmp/a b") == "/tmp/a b"
    assert storage.local_path(b"/tmp/x") == "/tmp/x"
    with pytest.raises(InvalidArgumentError, match=r"a file:// URL names a path on this machine"):
        storage.local_path("file://otherhost/x")


def test_a_plain_path_is_not_taken_for_a_bucket(tmp_path: Path) -> None:
    # resolve() once read "/tmp/x" as bucket "p": exists() was False and glob() [] for files there
    (tmp_path / "a.tfrecord").write_bytes(b"x")
    for call in (storage.exists, storage.size_of, storage.glob, storage.resolve):
        with pytest.raises(InvalidArgumentError, match=r"not a URL"):
            call(str(tmp_path / "*.tfrecord" if call is storage.glob else tmp_path / "a.tfrecord"))
    assert storage.glob(f"file://{tmp_path}/*.tfrecord") == [f"file://{tmp_path}/a.tfrecord"]


def test_credentials_are_refused_and_masked() -> None:
    assert storage.redact("s3://AKIA:s3cr3t@b/k") == "s3://***@b/k"
    assert storage.redact("s3://b/k?region=eu&secret_key=s3cr3t") == "s3://b/k?region=eu&secret_key=***"
    assert storage.redact("abfs://container@account.dfs.core.windows.net/x") == (
        "abfs://container@account.dfs.core.windows.net/x")  # no secret in container@account
    for url in ("s3://AKIA:s3cr3t@b/k", "s3://b/k?access_key=AKIA&secret_key=s3cr3t",
                "gs://b/k?token=s3cr3t"):
        with pytest.raises(InvalidArgumentError) as info:
            storage.check_no_credentials(url)
        assert "s3cr3t" not in str(info.value) and "credential chain" in str(info.value)
    storage.check_no_credentials("abfs://container@account.dfs.core.windows.net/x")
    storage.check_no_credentials("s3://b/k?region=eu-west-1")


@pytest.mark.parametrize(
    ("exc", "kind"),
    [
        (FileNotFoundError("Path does not exist 'b/k'"), "not_found"),
        (OSError("AWS Error NO_SUCH_BUCKET during HeadBucket"), "not_found"),
        (PermissionError("denied"), "denied"),
        (OSError("AWS Error ACCESS_DENIED during HeadObject operation: No response body."), "denied"),
        (OSError("AWS Error SLOW_DOWN during GetObject operation: Please reduce your request rate."),
         "throttled"),
        (OSError("AWS Error SERVICE_UNAVAILABLE during GetObject operation: "), "throttled"),
        (OSError("AWS Error NETWORK_CONNECTION during GetObject operation: curlCode: 56, "
                 "Failure when receiving data from the peer"), "transient"),
        (OSError("curlCode: 18, Transferred a partial file"), "transient"),
        (ConnectionResetError("reset"), "transient"),
        (TimeoutError("slow"), "transient"),
        (OSError("AWS Error INTERNAL_FAILURE: 500 Internal Server Error"), "transient"),
        (OSError("something else entirely"), "fatal"),
    ],
)
def test_failures_are_classified(exc: BaseException, kind: str) -> None:
    assert _filesystems.classify(exc) == kind


def test_retrying_maps_errors_and_spends_its_budget(small_blocks: None,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "very-secret-value")
    calls = []

    def flaky() -> int:
        calls.append(1)
        if len(calls) < 3:
            raise OSError("AWS Error SLOW_DOWN: Please reduce your request rate.")
        return 7

    throttles = []
    assert _filesystems.retrying(flaky, "s3://b/k", "read", offset=5,
                                 on_throttle=lambda: throttles.append(1)) == 7
    assert len(calls) == 3 and len(throttles) == 2
    stats = storage.statistics()
    assert stats["retries"] == 2 and stats["throttled"] == 2 and stats["requests"] == 3

    def down() -> None:
        raise OSError("connection refused; key very-secret-value")

    with pytest.raises(DataLossError, match=r"^s3://b/k: read failed at offset 9 after \d+ "
                       r"attempts in 0\.\d s \(retry budget 0\.2 s\): connection refused; key \*\*\*$"):
        _filesystems.retrying(down, "s3://b/k", "read", offset=9)
    with pytest.raises(UnavailableError, match=r"^s3://b/k: open failed after"):
        _filesystems.retrying(down, "s3://b/k", "open")
    with pytest.raises(NotFoundError, match=r"^s3://b/k; No such file or directory"):
        _filesystems.retrying(lambda: (_ for _ in ()).throw(FileNotFoundError("gone")),
                              "s3://b/k", "open")
    with pytest.raises(PermissionDeniedError, match=r"^s3://b/k: permission denied"):
        _filesystems.retrying(lambda: (_ for _ in ()).throw(OSError("ACCESS_DENIED")),
                              "s3://b/k", "open")
    assert storage.statistics()["failures"] == 2


@pytest.fixture
def gs_bucket(tmp_path: Path) -> Iterator[Path]:
    """``gs://`` served by a registered pyarrow filesystem over a local folder:
    the seam GCS, HDFS and Azure clients plug into."""
    (tmp_path / "bkt").mkdir()
    storage.register_filesystem("gs://", pafs.SubTreeFileSystem(str(tmp_path), pafs.LocalFileSystem()))
    try:
        yield tmp_path / "bkt"
    finally:
        storage.register_filesystem("gs://", None)


def test_a_registered_filesystem_serves_readers_globs_and_writers(
        gs_bucket: Path, small_blocks: None) -> None:
    recs = [bytes([i]) * (i * 97 % 4000) for i in range(60)]
    (gs_bucket / "train").mkdir()  # a local folder; a bucket needs none
    for name in ("a", "b"):
        with TFRecordWriter(f"gs://bkt/train/{name}.tfrecord", "GZIP") as w:
            w.write_many(recs)
    (gs_bucket / "train" / "notes.txt").write_text("x")
    files = feedq.match_filenames_once("gs://bkt/train/*.tfrecord")
    assert list(files) == ["gs://bkt/train/a.tfrecord", "gs://bkt/train/b.tfrecord"]
    got = []
    with TFRecordReader(options="GZIP") as r:
        q = closed_queue(*files)
        while True:
            try:
                keys, values = r.read_up_to(q, 7)
            except OutOfRangeError:
                break
            got += values.tolist()
            assert all(k.startswith(b"gs://bkt/train/") for k in keys.tolist())
    assert got == recs + recs
    stats = storage.statistics()
    # 1,000-byte blocks: the read-ahead asked for every byte once.
    sizes = sum((gs_bucket / "train" / f"{n}.tfrecord").stat().st_size for n in "ab")
    assert stats["files_opened"] == 2 and stats["bytes"] == sizes
    assert stats["requests"] >= sizes // 1000
    assert storage.size_of("gs://bkt/train/a.tfrecord") == sizes // 2
    assert storage.exists("gs://bkt/train/a.tfrecord") and not storage.exists("gs://bkt/nope")


def test_a_seek_away_from_the_read_ahead_reads_the_right_bytes(
        gs_bucket: Path, small_blocks: None) -> None:
    data = bytes(range(256)) * 40
    (gs_bucket / "blob").write_bytes(data)
    f = storage.open_remote("gs://bkt/blob")
    try:
        assert f.read(10) == data[:10]
        f.seek(5000)
        assert f.read(2500) == data[5000:7500]
        f.seek(100)
        assert f.read(50) == data[100:150]
        assert f.read(-1) == data[150:]
        assert f.read(10) == b""
    finally:
        f.close()
    with pytest.raises(ValueError, match=r"closed"):
        f.read(1)


def test_missing_file_on_a_registered_filesystem_is_not_found(gs_bucket: Path) -> None:
    r = TextLineReader()
    (gs_bucket / "ok.txt").write_text("a\nb\n")
    q = closed_queue("gs://bkt/gone.txt", "gs://bkt/ok.txt")
    with pytest.raises(NotFoundError, match=r"^gs://bkt/gone.txt; No such file or directory"):
        r.read_up_to(q, 5)
    assert r.read_up_to(q, 5)[1].tolist() == [b"a", b"b"]
    r.close()


def test_the_fsspec_fallback_serves_schemes_pyarrow_does_not_know(small_blocks: None) -> None:
    fsspec = pytest.importorskip("fsspec")
    mem = fsspec.filesystem("memory")
    with mem.open("/feedq-test/x.txt", "wb") as f:
        f.write(b"".join(b"line %d\n" % i for i in range(500)))
    try:
        with TextLineReader() as r:
            q = closed_queue("memory://feedq-test/x.txt")
            got = []
            while True:
                try:
                    got += r.read_up_to(q, 64)[1].tolist()
                except OutOfRangeError:
                    break
        assert got == [b"line %d" % i for i in range(500)]
    finally:
        mem.rm("/feedq-test", recursive=True)


def test_without_fsspec_an_unknown_scheme_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "fsspec", None)
    with _filesystems._lock:
        _filesystems._clients.pop(("feedqnosuch", "b"), None)
    with pytest.raises(MissingExtraError, match=r'pip install "feedq\[fsspec\]"'):
        storage.resolve("feedqnosuch://b/k")


def test_settings_are_checked() -> None:
    with pytest.raises(ValueError, match=r"block_bytes and read_ahead must be >= 1"):
        storage.configure(read_ahead=0)
    with pytest.raises(TypeError):
        storage.configure(no_such_setting=1)
    assert storage.options() == storage.StorageOptions()
    with pytest.raises(ValueError, match=r"prefix must start with scheme://"):
        storage.register_filesystem("bucket", pafs.LocalFileSystem())
    with pytest.raises(TypeError, match=r"not a pyarrow or fsspec filesystem"):
        storage.register_filesystem("gs://x", object())


def test_a_store_that_spent_a_budget_fails_the_next_requests_in_the_connect_budget(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A store that answered once and then went down costs one whole retry
    budget, not one per remaining file: after a request spent its budget,
    the next requests to that store get connect_budget_s (and say so) until
    one succeeds; other stores keep the whole budget."""
    monkeypatch.setattr(_filesystems, "_answered", {"s3://dead"})
    monkeypatch.setattr(_filesystems, "_down", set())
    old = storage.configure(retry_budget_s=1.0, connect_budget_s=0.1,
                            backoff_initial_s=0.001, backoff_max_s=0.01)
    try:
        reset = OSError("curlCode: 56, Failure when receiving data from the peer")

        def down() -> None:
            raise reset

        t0 = time.monotonic()
        with pytest.raises(DataLossError, match=r"\(retry budget 1 s\)"):
            _filesystems.retrying(down, "s3://dead/a", "read", offset=7)
        assert time.monotonic() - t0 >= 1.0
        t0 = time.monotonic()
        with pytest.raises(DataLossError, match=r"^s3://dead/b: read failed at offset 0 .*"
                           r"\(store down: connect budget 0\.1 s\)"):
            _filesystems.retrying(down, "s3://dead/b", "read", offset=0)
        assert time.monotonic() - t0 < 0.9
        # Another store is not affected.
        t0 = time.monotonic()
        with pytest.raises(UnavailableError, match=r"\(retry budget 1 s\)"):
            _filesystems.retrying(down, "s3://alive/c", "open")
        assert time.monotonic() - t0 >= 1.0
        # A success clears it: the store gets the whole budget again.
        assert _filesystems.retrying(lambda: 3, "s3://dead/d", "open") == 3
        calls: list[int] = []

        def recovers() -> int:
            calls.append(1)
            if time.monotonic() - t0 < 0.4:  # longer than the connect budget
                raise reset
            return 4

        t0 = time.monotonic()
        assert _filesystems.retrying(recovers, "s3://dead/e", "read", offset=0) == 4
        assert len(calls) > 1
    finally:
        storage.configure(**dataclasses.asdict(old))


def test_a_store_that_never_answered_fails_within_the_connect_budget_naming_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A wrong endpoint (connections refused from the first request) fails
    in connect_budget_s, not retry_budget_s; once the store answered, the
    same failure is transient and gets the whole retry budget."""
    monkeypatch.setattr(_filesystems, "_answered", set())
    old = storage.configure(retry_budget_s=5.0, connect_budget_s=0.2,
                            backoff_initial_s=0.001, backoff_max_s=0.01)
    try:
        refused = OSError("AWS Error NETWORK_CONNECTION during HeadObject operation: curlCode: 7, "
                          "Could not connect to server")

        def down() -> None:
            raise refused

        t0 = time.monotonic()
        with pytest.raises(UnavailableError, match=r"^s3://nowhere/k: open failed after \d+ attempts "
                           r"in 0\.\d s \(connect budget 0\.2 s\): .*Could not connect to server; "
                           r"s3://nowhere has not answered once in this process: check the endpoint"):
            _filesystems.retrying(down, "s3://nowhere/k", "open")
        assert time.monotonic() - t0 < 2.0
        # The store answers once; a later refusal is retried until it recovers.
        assert _filesystems.retrying(lambda: 1, "s3://nowhere/other", "open") == 1
        calls: list[int] = []

        def recovers() -> int:
            calls.append(1)
            if time.monotonic() - t0 < 0.6:  # longer than the connect budget
                raise refused
            return 2

        t0 = time.monotonic()
        assert _filesystems.retrying(recovers, "s3://nowhere/k", "read", offset=0) == 2
        assert len(calls) > 1
        # An endpoint that accepts connections and never answers times out
        # instead: the whole retry budget, and the same hint while the store
        # has never answered.
        storage.configure(retry_budget_s=0.2)

        def hangs() -> None:
            raise OSError("curlCode: 28, Timeout was reached")

        with pytest.raises(UnavailableError, match=r"\(retry budget 0\.2 s\): .*Timeout was reached; "
                           r"s3://silent has not answered once in this process: check the endpoint"):
            _filesystems.retrying(hangs, "s3://silent/k", "open")
        with pytest.raises(UnavailableError, match=r"Timeout was reached$"):
            _filesystems.retrying(hangs, "s3://nowhere/k", "open")  # it answered before
    finally:
        storage.configure(**dataclasses.asdict(old))


def test_a_refused_local_endpoint_fails_in_seconds_through_the_s3_client(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setattr(_filesystems, "_answered", set())
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    old = storage.configure(connect_budget_s=0.5, backoff_initial_s=0.01, backoff_max_s=0.05)
    try:
        t0 = time.monotonic()
        with pytest.raises(UnavailableError, match=r"connect budget 0\.5 s.*has not answered once"):
            TFRecordReader().read(closed_queue(f"s3://refused-{port}/data.tfrecord"))
        assert time.monotonic() - t0 < 10.0
    finally:
        storage.configure(**dataclasses.asdict(old))
