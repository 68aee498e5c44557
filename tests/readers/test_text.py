"""TextLineReader and the common reader behaviour (spec R1-R10, X6, state)."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest

from feedq.errors import InvalidArgumentError, NotFoundError, OutOfRangeError
from feedq.queues import FIFOQueue
from feedq.readers import RecordBlock, TextLineReader

pytestmark = pytest.mark.timeout(10)


def closed_queue(*names: str | Path) -> FIFOQueue:
    """A closed filename queue holding ``names`` (R1)."""
    q = FIFOQueue(capacity=-1, dtypes=["string"], shapes=[[]])
    if names:
        q.enqueue_many([[str(n) for n in names]])
    q.close()
    return q


def drain(reader, q, n: int) -> list[tuple[list[bytes], list[bytes]]]:
    out = []
    while True:
        try:
            k, v = reader.read_up_to(q, n)
        except OutOfRangeError:
            return out
        out.append((k.tolist(), v.tolist()))


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    data = {"a": b"a1\na2\na3\na4\na5\n", "b": b"", "c": b"c1\n", "d": b"d1\nd2"}
    out = {}
    for k, v in data.items():
        p = tmp_path / f"{k}.txt"
        p.write_bytes(v)
        out[k] = p
    return out


def test_r5_read_up_to_never_mixes_files(files: dict[str, Path]) -> None:
    # R5 (Obs, n=3 over files of 5,0,1,2 lines): [a1 a2 a3] [a4 a5] [c1] [d1 d2].
    q = closed_queue(files["a"], files["b"], files["c"], files["d"])
    got = [v for _, v in drain(TextLineReader(), q, 3)]
    assert got == [[b"a1", b"a2", b"a3"], [b"a4", b"a5"], [b"c1"], [b"d1", b"d2"]]


def test_r10_keys_are_physical_line_numbers(files: dict[str, Path]) -> None:
    q = closed_queue(files["a"])
    keys, _ = TextLineReader().read_up_to(q, 2)
    assert keys.tolist() == [f"{files['a']}:1".encode(), f"{files['a']}:2".encode()]


def test_r10_skip_header_lines_applies_to_every_file(files: dict[str, Path]) -> None:
    # The first key with skip 1 is a.txt:2; c.txt (1 line) yields nothing.
    q = closed_queue(files["a"], files["c"], files["d"])
    r = TextLineReader(skip_header_lines=1)
    got = []
    while True:
        try:
            got.append(r.read(q))
        except OutOfRangeError:
            break
    a, d = str(files["a"]), str(files["d"])
    assert got[0] == (f"{a}:2".encode(), b"a2")
    assert got[-1] == (f"{d}:2".encode(), b"d2")
    assert len(got) == 5


def test_r10_crlf_empty_lines_and_last_line_without_newline(tmp_path: Path) -> None:
    # Verified against TF1's TextLineReader: one trailing '\r' is dropped,
    # one in the middle of a line is kept ("c\r\r\n" gives "c\r").
    p = tmp_path / "crlf.txt"
    p.write_bytes(b"x\r\n\r\n\ny\rz\r\nc\r\r\nlast\r")
    with TextLineReader() as r:
        _, v = r.read_up_to(closed_queue(p), 10)
    assert v.tolist() == [b"x", b"", b"", b"y\rz", b"c\r", b"last"]


def test_r10_negative_skip_is_invalid() -> None:
    with pytest.raises(InvalidArgumentError, match=r"^skip_header_lines must be >= 0, got -1$"):
        TextLineReader(skip_header_lines=-1)


def test_r2_closed_empty_queue_raises_the_queues_out_of_range() -> None:
    with pytest.raises(OutOfRangeError, match=r"is closed and has insufficient elements"):
        TextLineReader().read(closed_queue())


def test_r2_open_empty_queue_blocks_until_timeout() -> None:
    from feedq.errors import DeadlineExceededError

    q = FIFOQueue(capacity=-1, dtypes=["string"], shapes=[[]])
    with pytest.raises(DeadlineExceededError):
        TextLineReader().read(q, timeout=0.05)


def test_r1_queue_elements_must_be_single_strings() -> None:
    class Two:
        def dequeue(self, timeout: float | None = None) -> list[bytes]:
            return [b"a", b"b"]

    with pytest.raises(InvalidArgumentError, match=r"^Expected queue with single string component$"):
        TextLineReader().read(Two())


def test_r4_counters_follow_tf1(files: dict[str, Path]) -> None:
    # Obs: after the last line of a.txt the count is 0; after the next read
    # (first line of c.txt, having passed a.txt and empty b.txt) it is 2.
    q = closed_queue(files["a"], files["b"], files["c"])
    r = TextLineReader()
    for _ in range(5):
        r.read(q)
    assert r.num_work_units_completed() == 0
    assert r.read(q)[1] == b"c1"
    assert r.num_work_units_completed() == 2
    assert r.num_records_produced() == 6


def test_r5_a_call_that_stops_at_end_of_file_counts_it(files: dict[str, Path]) -> None:
    r = TextLineReader()
    q = closed_queue(files["a"], files["c"])
    r.read_up_to(q, 5)  # exactly n: end not observed yet
    assert r.num_work_units_completed() == 0
    r.read_up_to(q, 5)  # c1 only: stopped at the end of c.txt
    assert r.num_work_units_completed() == 2


def test_r6_reset_zeroes_counters_and_drops_the_work_unit(files: dict[str, Path]) -> None:
    q = closed_queue(files["a"], files["c"])
    r = TextLineReader()
    r.read(q)
    r.reset()
    assert (r.num_records_produced(), r.num_work_units_completed()) == (0, 0)
    assert r.read(q)[1] == b"c1"


def test_r8_missing_file_raises_once_then_moves_on(files: dict[str, Path], tmp_path: Path) -> None:
    missing = tmp_path / "nope.txt"
    q = closed_queue(missing, files["c"])
    r = TextLineReader()
    with pytest.raises(NotFoundError, match=rf"^{missing}; No such file or directory$"):
        r.read(q)
    assert r.read(q)[1] == b"c1"
    with pytest.raises(OutOfRangeError):
        r.read(q)
    assert r.num_work_units_completed() == 1  # the missing file is not counted (R4)


def test_x6_on_error_skip_counts_and_logs(files: dict[str, Path], tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    missing = tmp_path / "nope.txt"
    r = TextLineReader(on_error="skip")
    with caplog.at_level(logging.WARNING, logger="feedq.readers"):
        assert r.read(closed_queue(missing, files["c"]))[1] == b"c1"
    assert r.num_errors_skipped() == 1
    assert str(missing) in caplog.text


def test_on_error_is_validated() -> None:
    with pytest.raises(ValueError, match=r"^on_error must be 'raise' or 'skip', got 'ignore'$"):
        TextLineReader(on_error="ignore")  # type: ignore[arg-type]


def test_read_block_is_one_buffer_with_a_span(files: dict[str, Path]) -> None:
    block = TextLineReader().read_block(closed_queue(files["a"]), 3)
    assert isinstance(block, RecordBlock) and len(block) == 3
    assert block.data[block.span[0] : block.span[1]] == b"a1\na2\na3\n"
    assert block.values().tolist() == [b"a1", b"a2", b"a3"]
    assert block.key_ids.tolist() == [1, 2, 3]


def test_memory_is_bounded_by_block_bytes(tmp_path: Path) -> None:
    # A file larger than the block: the buffer never holds the whole file.
    p = tmp_path / "big.txt"
    p.write_bytes(b"".join(b"%08d\n" % i for i in range(20000)))  # 180 kB
    r = TextLineReader(block_bytes=8192)
    q = closed_queue(p)
    seen, peak = 0, 0
    while True:
        try:
            block = r.read_block(q, 100000)
        except OutOfRangeError:
            break
        peak = max(peak, len(block.data))
        assert block.values()[0] == b"%08d" % seen
        seen += len(block)
    assert seen == 20000
    assert peak <= 2 * 8192


def test_long_line_grows_the_buffer_for_that_line(tmp_path: Path) -> None:
    p = tmp_path / "long.txt"
    p.write_bytes(b"x" * 50000 + b"\nshort\n")
    r = TextLineReader(block_bytes=1024)
    _, v = r.read_up_to(closed_queue(p), 5)
    assert [len(x) for x in v] == [50000, 5]


@pytest.mark.parametrize("stop", [0, 1, 3, 4, 5, 6])
def test_state_dict_resumes_exactly(files: dict[str, Path], stop: int) -> None:
    # R7: TF1 left SerializeState unimplemented; feedq saves file + offset.
    names = [files["a"], files["b"], files["d"]]
    full = [v for _, v in drain(TextLineReader(skip_header_lines=1), closed_queue(*names), 1)]
    r = TextLineReader(skip_header_lines=1)
    q = closed_queue(*names)
    first = [r.read(q)[1] for _ in range(min(stop, len(full)))]
    state = r.state_dict()
    r2 = TextLineReader(skip_header_lines=1)
    r2.load_state_dict(state)
    rest = [v for _, v in drain(r2, q, 1)]
    assert [[x] for x in first] + rest == full
    assert r2.num_records_produced() == len(full)


def test_load_state_dict_rejects_another_readers_state(files: dict[str, Path]) -> None:
    from feedq.readers import WholeFileReader

    with pytest.raises(ValueError, match=r"^state is from 'WholeFileReader', not TextLineReader$"):
        TextLineReader().load_state_dict(WholeFileReader().state_dict())


def test_num_records_must_be_positive(files: dict[str, Path]) -> None:
    with pytest.raises(InvalidArgumentError, match=r"^num_records must be >= 1, got 0$"):
        TextLineReader().read_up_to(closed_queue(files["a"]), 0)


def test_gzip_text(tmp_path: Path) -> None:
    import gzip

    p = tmp_path / "a.txt.gz"
    p.write_bytes(gzip.compress(b"l1\nl2\n"))
    _, v = TextLineReader(compression="GZIP").read_up_to(closed_queue(p), 5)
    assert v.tolist() == [b"l1", b"l2"]
    assert isinstance(v, np.ndarray)
