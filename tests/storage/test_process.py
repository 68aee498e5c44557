"""Process stages over s3:// URLs: each worker makes its own client (forked
after the parent made one), every record once across workers."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

import feedq
import feedq.storage as storage
from feedq.readers import TFRecordReader, TFRecordWriter
from feedq.storage import _filesystems
from tests.storage.conftest import Bucket

pytestmark = pytest.mark.timeout(60)


def build(worker_index: int, num_workers: int) -> Any:
    """Importable by spawned workers: the bucket's files, sharded by worker."""
    urls = sorted(os.environ["FEEDQ_TEST_URLS"].split(","))
    files = feedq.string_input_producer(
        feedq.distributed.shard_files(urls, worker_index, num_workers), num_epochs=1, shuffle=False)
    reader = TFRecordReader()
    return feedq.batch(lambda: [reader.read_up_to(files, 16)[1]], 10, enqueue_many=True,
                       dtypes=[feedq.STRING], shapes=[[]], allow_smaller_final_batch=True)


def test_a_forked_child_forgets_the_parents_clients(s3: Bucket) -> None:
    storage.resolve(s3.url("x"))
    assert _filesystems._clients  # cached here
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report what it has, then leave at once
        os.write(w, str(len(_filesystems._clients)).encode())
        os._exit(0)
    os.close(w)
    os.waitpid(pid, 0)
    assert os.read(r, 16) == b"0"
    os.close(r)


def test_process_stage_workers_read_the_bucket_with_their_own_clients(
        tmp_path: Path, s3: Bucket, monkeypatch: pytest.MonkeyPatch) -> None:
    # Forked workers (spawn and forkserver start clean): the parent made a
    # client first, each worker makes its own.
    urls = []
    for i in range(4):
        with TFRecordWriter(tmp_path / "x.tfr") as w:
            w.write_many([b"%d-%d" % (i, j) for j in range(40)])
        urls.append(s3.put(f"p/{i}.tfr", (tmp_path / "x.tfr").read_bytes()))
    monkeypatch.setenv("FEEDQ_TEST_URLS", ",".join(urls))
    storage.open_remote(urls[0]).close()  # the parent has a client before the fork
    got: list[bytes] = []
    with feedq.process_stage(build, num_processes=2, start_method="fork") as stage:
        for batch in stage:
            got += [bytes(x) for x in batch]
    assert sorted(got) == sorted(b"%d-%d" % (i, j) for i in range(4) for j in range(40))


def test_pipeline_statistics_add_up_the_remote_reads_of_process_stage_workers(
        tmp_path: Path, s3: Bucket, monkeypatch: pytest.MonkeyPatch) -> None:
    urls = []
    size = 0
    for i in range(4):
        with TFRecordWriter(tmp_path / "x.tfr") as w:
            w.write_many([b"%d-%d" % (i, j) * 50 for j in range(40)])
        size += (tmp_path / "x.tfr").stat().st_size
        urls.append(s3.put(f"q/{i}.tfr", (tmp_path / "x.tfr").read_bytes()))
    monkeypatch.setenv("FEEDQ_TEST_URLS", ",".join(urls))
    storage.open_remote(urls[0]).close()  # the parent's reads before: a forked worker inherits them
    got = 0
    with feedq.Pipeline() as pipe:
        stage = feedq.process_stage(build, num_processes=2, start_method="fork")
        for batch in stage:
            got += len(batch)
        stats = pipe.statistics()
    assert got == 160
    st = stats.storage
    # The parent read nothing in the pipeline: these are the workers' reads, each
    # counted once (not the counters a forked worker started with).
    assert st is not None and st.files_opened == 4 and st.bytes == size
    assert st.requests >= 8 and st.failures == 0
    assert "remote storage: 4 files opened" in feedq.format_report(stats)
