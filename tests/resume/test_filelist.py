"""A file producer's list in a state: a digest, not every name.

Sizes are asserted (a state over 100,000 files fits in 64 KiB; the time
``state_dict()`` takes is measured by ``benchmarks/resume_state.py``), and
so are the mismatch messages: the exact file for short lists, a chunk of
at most 32 files for 100,000. States whose lists are digests restore
exactly, re-shard with ``files=`` (and refuse without it, by name), and
states of the older format (every name, no digest) still load.
"""

from __future__ import annotations

import pickle
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import feedq
from feedq._resume import filelist
from feedq._resume.filelist import FileList
from feedq.errors import InvalidArgumentError
from feedq.readers import TextLineReader, decode_csv
from tests.resume import _support as rs


def _names(n: int, prefix: str = "s3://bucket/train") -> list[bytes]:
    return [f"{prefix}/part-{i:06d}-of-{n:06d}.tfrecord".encode() for i in range(n)]


# -- the digest itself -----------------------------------------------------------------------


def test_chunk_size_keeps_the_table_bounded() -> None:
    assert [filelist.chunk_size(n) for n in (0, 1, 4096, 4097, 10_000, 100_000, 10**6)] == [
        1, 1, 1, 2, 4, 32, 256]
    for n in (4097, 100_000, 10**6):
        assert -(-n // filelist.chunk_size(n)) <= filelist.MAX_CHUNKS


def test_small_lists_are_kept_whole_and_named_exactly() -> None:
    names = _names(100)
    files = FileList(names)
    assert files.inputs() == [v.decode() for v in names]
    assert files.digest()["chunk"] == 0 and files.digest()["crcs"] == ""
    other = list(names)
    other[37] = b"s3://bucket/train/other.tfrecord"
    assert FileList(other).difference(files.inputs(), files.digest()) == (
        "file 37 differs: saved 's3://bucket/train/part-000037-of-000100.tfrecord', "
        "now 's3://bucket/train/other.tfrecord'")
    assert FileList(names[:-1]).difference(files.inputs(), files.digest()) == (
        "saved 100 files, now 99; the first 99 are the same")
    assert FileList(names).difference(files.inputs(), files.digest()) is None


def test_large_lists_are_a_digest_that_locates_a_difference() -> None:
    names = _names(100_000)
    files = FileList(names)
    digest = files.digest()
    assert files.inputs() is None
    assert digest["count"] == 100_000 and digest["chunk"] == 32
    assert len(pickle.dumps(digest)) <= 24 * 1024  # 3,125 CRCs, base64
    changed = list(names)
    changed[54_321] = b"s3://bucket/train/changed.tfrecord"
    assert FileList(changed).difference(None, digest) == (
        "saved 100,000 files, now 100,000; the first difference is in files 54,304..54,335 "
        "(now 's3://bucket/train/part-054304-of-100000.tfrecord' .. "
        "'s3://bucket/train/part-054335-of-100000.tfrecord')")
    assert FileList(names + [b"s3://bucket/x"]).difference(None, digest) == (
        "saved 100,000 files, now 100,001; the first 100,000 are the same")
    assert FileList(names[:-1]).difference(None, digest) == (
        "saved 100,000 files, now 99,999; the first difference is in files 99,968..99,999 "
        "(now 's3://bucket/train/part-099968-of-100000.tfrecord' .. (past the end))")
    assert FileList(names[:99_968]).difference(None, digest) == (
        "saved 100,000 files, now 99,968; the first 99,968 are the same")
    assert FileList(names).difference(None, digest) is None
    swapped = list(names)
    swapped[0], swapped[1] = swapped[1], swapped[0]  # same set, other order
    assert "files 0..31" in str(FileList(swapped).difference(None, digest))


def test_a_list_of_4096_files_is_located_to_the_file() -> None:
    names = _names(4096, prefix="gs://a-longer-bucket-name/some/deeper/prefix/of/the/dataset")
    files = FileList(names)
    assert files.inputs() is None and files.digest()["chunk"] == 1
    changed = list(names)
    changed[3000] = b"gs://x"
    assert FileList(changed).difference(None, files.digest()) == (
        "saved 4,096 files, now 4,096; file 3,000 differs (now 'gs://x')")


def test_a_corrupt_table_is_named() -> None:
    digest = FileList(_names(10_000)).digest()
    digest["crcs"] = "not base64!"
    with pytest.raises(InvalidArgumentError, match="chunk table is corrupt"):
        FileList(_names(9_000)).difference(None, digest)


# -- pipelines over very many files ---------------------------------------------------------


def _many(tmp_path: Path, n: int, real: int = 4, records: int = 200) -> list[str]:
    """``n`` file names of which the first ``real`` exist (``records`` ids each)."""
    folder = tmp_path / "train"
    folder.mkdir()
    paths = [str(folder / f"part-{i:06d}-of-{n:06d}.csv") for i in range(n)]
    for f in range(real):
        Path(paths[f]).write_text("".join(f"{f * records + i}\n" for i in range(records)))
    return paths


def _build(paths: list[str]) -> rs.Build:
    """In order (no shuffle of files), one reader, shuffle_batch seeded: exact mode."""
    def build(pipe: feedq.Pipeline) -> None:
        files = feedq.string_input_producer(paths, shuffle=False, num_epochs=1, capacity=4)
        reader = pipe.closing(TextLineReader())

        def read() -> list[Any]:
            (i,) = decode_csv(reader.read_block(files, 25), record_defaults=[[0]])
            return [i]

        feedq.shuffle_batch(read, 16, capacity=120, min_after_dequeue=60, seed=3,
                            enqueue_many=True, dtypes=[np.int32], shapes=[[]])
    return build


def _ids(batch: Any) -> np.ndarray:
    return np.asarray(batch[0] if isinstance(batch, list) else batch).copy()


@pytest.mark.timeout(60)
def test_state_over_100000_files_is_small_and_restores_exactly(tmp_path: Path) -> None:
    """100,000 file names (the first 4 exist; the run stops inside them): the
    state is at most 64 KiB pickled and holds no name; restored on the same
    list it continues with the uninterrupted run's batches; on a list that
    differs it is refused, naming where."""
    paths = _many(tmp_path, 100_000)
    build = _build(paths)
    full, state = rs.run_to(build, None, 30, key=_ids, upto=12)  # the state as of batch 12
    before = full[:12]
    assert len(pickle.dumps(state)) <= 64 * 1024
    assert state["inputs"] is None and state["inputs_digest"]["count"] == 100_000
    after, _ = rs.run_to(build, state, 18, key=_ids)
    assert rs.same(before + after, full)
    changed = list(paths)
    changed[70_000] = str(tmp_path / "elsewhere.csv")
    with pytest.raises(InvalidArgumentError, match=re.escape(
            "producer inputs: saved 100,000 files, now 100,000; the first difference is in "
            "files 69,984..70,015")):
        rs.run_to(_build(changed), state, 1, key=_ids)
    with pytest.raises(InvalidArgumentError, match=re.escape(
            "producer inputs: saved 100,000 files, now 99,999; the first difference is in "
            "files 99,968..99,999")):
        rs.run_to(_build(paths[:-1]), state, 1, key=_ids)


@pytest.mark.timeout(60)
def test_state_size_does_not_grow_with_the_list(tmp_path: Path) -> None:
    """10,000 and 100,000 names: both states fit in 64 KiB, and the larger
    list adds less than 8 KiB (a chunk table of at most 4,096 CRCs)."""
    sizes = []
    for n in (10_000, 100_000):
        folder = tmp_path / str(n)
        folder.mkdir()
        with feedq.Pipeline(resumable=True) as pipe:
            _build(_many(folder, n))(pipe)
            it = iter(pipe)
            for _ in range(3):
                next(it)
            sizes.append(len(pickle.dumps(pipe.state_dict())))
    assert max(sizes) <= 64 * 1024
    assert sizes[1] - sizes[0] < 8 * 1024


# -- older states and re-sharding -----------------------------------------------------------


def _long_named(tmp_path: Path, files: int) -> dict[str, Any]:
    """CSV data (ids, tags) in files whose names total more than 16 KiB."""
    folder = tmp_path / ("a-folder-whose-name-makes-every-path-long-" * 3)
    folder.mkdir()
    paths, rid = [], 0
    rng = np.random.default_rng(4)
    for f in range(files):
        n = int(rng.integers(1, 4))
        path = folder / f"part-{f:05d}.csv"
        path.write_text("".join(f"{i},t{i}\n" for i in range(rid, rid + n)))
        paths.append(str(path))
        rid += n
    assert sum(len(p.encode()) for p in paths) > filelist.INLINE_BYTES
    return {"fmt": "csv", "total": rid, "paths": paths}


@pytest.mark.timeout(60)
def test_digest_states_restore_and_older_states_still_load(tmp_path: Path) -> None:
    data = _long_named(tmp_path, 150)

    def build(pipe: feedq.Pipeline) -> None:
        rs.build(pipe, data, "exact", 1)

    full, _ = rs.run_to(build)
    before, state = rs.run_to(build, None, 9)
    assert state["inputs"] is None and state["inputs_digest"]["count"] == 150
    after, _ = rs.run_to(build, state)
    assert rs.same(before + after, full)
    # The older format: every name in "inputs", no digest.
    old = {k: v for k, v in state.items() if k != "inputs_digest"}
    old["inputs"] = list(data["paths"])
    after, _ = rs.run_to(build, old)
    assert rs.same(before + after, full)
    other = dict(data, paths=data["paths"][:3] + [data["paths"][0]] + data["paths"][4:])
    with pytest.raises(InvalidArgumentError, match=r"producer inputs: file 3 differs: saved "
                       r"'.*part-00003\.csv', now '.*part-00000\.csv'"):
        rs.run_to(lambda pipe: rs.build(pipe, other, "exact", 1), old, 1)


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda d: "digest", "inputs_digest is a str, not a dict"),
        (lambda d: {k: v for k, v in d.items() if k != "count"}, "inputs_digest has no 'count'"),
        (lambda d: dict(d, count="150"), "count must be an int >= 0, got '150'"),
        (lambda d: dict(d, chunk=-1), "chunk must be an int >= 0, got -1"),
        (lambda d: dict(d, sha256="00"), "sha256 must be 64 lower-case hex digits"),
        (lambda d: dict(d, crcs=None), "crcs must be a string, got None"),
                # A list whose digest no longer matches is compared chunk by chunk
        # on restore; re-sharding only sees that it names other files.
        (lambda d: dict(d, crcs="%%%", sha256="0" * 64), "chunk table is corrupt"),
    ],
)
def test_a_damaged_digest_is_refused_by_name_never_a_key_error(
    tmp_path: Path, damage: Any, message: str
) -> None:
    data = _long_named(tmp_path, 150)

    def build(pipe: feedq.Pipeline) -> None:
        rs.build(pipe, data, "exact", 1)

    _, state = rs.run_to(build, None, 5)
    bad = dict(state, inputs_digest=damage(dict(state["inputs_digest"])))
    with pytest.raises(InvalidArgumentError, match=re.escape(message)):
        rs.run_to(build, bad, 1)
    with pytest.raises(InvalidArgumentError, match=re.escape(message) + "|it lists other files"):
        feedq.reshard_states([bad], 2, files=data["paths"])
    no_fingerprint = {k: v for k, v in state.items() if k != "fingerprint"}
    with pytest.raises(InvalidArgumentError, match="fingerprint is missing or malformed"):
        rs.run_to(build, no_fingerprint, 1)
    for key in ("producer", "units", "skips", "worklist", "exact"):
        without = {k: v for k, v in state.items() if k != key}
        with pytest.raises(InvalidArgumentError, match=f"not a feedq pipeline state: it has no '{key}'"):
            rs.run_to(build, without, 1)


def _rank(paths: list[str], state: dict[str, Any] | None, stop: int | None) -> tuple[list[np.ndarray], dict[str, Any]]:
    def build(pipe: feedq.Pipeline) -> None:
        files = feedq.string_input_producer(paths, num_epochs=1, seed=5)
        reader = pipe.closing(TextLineReader())

        def read() -> list[Any]:
            (i, _tag) = decode_csv(reader.read_block(files, 10), record_defaults=[[0], [""]])
            return [i]

        feedq.shuffle_batch(read, 8, capacity=60, min_after_dequeue=30, seed=1, enqueue_many=True,
                            dtypes=[np.int32], shapes=[[]], allow_smaller_final_batch=True)

    return rs.run_to(build, state, stop, key=_ids)


@pytest.mark.timeout(60)
def test_reshard_digest_states_needs_files(tmp_path: Path) -> None:
    """Rank states that name their files by digest re-shard with ``files=``
    (2 -> 3: every record exactly once) and are refused without it, or
    with the states in the wrong order, by name."""
    data = _long_named(tmp_path, 240)
    paths = data["paths"]
    delivered: list[np.ndarray] = []
    states = []
    for r, stop in enumerate((5, 11)):
        got, state = _rank(paths[r::2], None, stop)
        assert state["inputs"] is None
        delivered += got
        states.append(state)
    with pytest.raises(InvalidArgumentError, match=r"^state 0 names its 120 files by digest only "
                       r"\(a state lists its files only while their names total at most 16 KiB\): "
                       r"pass files=, the global file list, to reshard_states$"):
        feedq.reshard_states(states, 3)
    with pytest.raises(InvalidArgumentError, match=r"state 0 is not rank 0's of 2 .*it is files\[1::2\]"):
        feedq.reshard_states(states[::-1], 3, files=paths)
    resharded = feedq.reshard_states(states, 3, files=paths)
    for r, state in enumerate(resharded):
        assert state["inputs_digest"]["count"] == len(paths[r::3])
        got, _ = _rank(paths[r::3], state, None)
        delivered += got
    np.testing.assert_array_equal(np.sort(np.concatenate(delivered)), np.arange(data["total"]))
    with pytest.raises(InvalidArgumentError, match=r"the state is for rank 0 of 3.*; file 0 differs"):
        _rank(paths[1::3], resharded[0], None)
