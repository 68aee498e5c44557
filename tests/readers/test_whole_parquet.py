"""WholeFileReader (spec R15, R9) and ParquetReader (beyond TF1)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from feedq.errors import DataLossError, NotFoundError, OutOfRangeError
from feedq.queues import FIFOQueue
from feedq.readers import ParquetReader, WholeFileReader

pytestmark = pytest.mark.timeout(10)


def closed_queue(*names: str | Path) -> FIFOQueue:
    q = FIFOQueue(capacity=-1, dtypes=["string"], shapes=[[]])
    if names:
        q.enqueue_many([[str(n) for n in names]])
    q.close()
    return q


def test_r15_one_record_per_file_key_is_the_work_unit(tmp_path: Path) -> None:
    a, e = tmp_path / "a.bin", tmp_path / "e.bin"
    a.write_bytes(b"hello\nworld")
    e.write_bytes(b"")
    r = WholeFileReader()
    q = closed_queue(a, e)
    assert r.read(q) == (str(a).encode(), b"hello\nworld")
    assert r.num_work_units_completed() == 1  # each read completes a work unit
    keys, values = r.read_up_to(q, 5)
    assert keys.tolist() == [str(e).encode()] and values.tolist() == [b""]
    assert r.num_work_units_completed() == 2
    with pytest.raises(OutOfRangeError):
        r.read(q)


def test_r15_missing_file_raises_once_then_moves_on(tmp_path: Path) -> None:
    # TF1 raised this NotFound forever (R9); feedq moves on.
    a = tmp_path / "a.bin"
    a.write_bytes(b"x")
    r = WholeFileReader()
    q = closed_queue(tmp_path / "gone.bin", a)
    with pytest.raises(NotFoundError, match=r"gone.bin; No such file or directory$"):
        r.read(q)
    assert r.read(q)[1] == b"x"


def test_whole_file_state(tmp_path: Path) -> None:
    a = tmp_path / "a.bin"
    a.write_bytes(b"x")
    r = WholeFileReader()
    r.read(closed_queue(a))
    r2 = WholeFileReader()
    r2.load_state_dict(r.state_dict())
    assert r2.num_records_produced() == 1 and r2.num_work_units_completed() == 1


@pytest.fixture
def parquet_files(tmp_path: Path) -> list[Path]:
    out = []
    for i, n in enumerate([250, 0, 40]):
        t = pa.table({"x": np.arange(n, dtype=np.float32) + 1000 * i, "s": [f"r{j}" for j in range(n)]})
        p = tmp_path / f"p{i}.parquet"
        pq.write_table(t, p, row_group_size=100)
        out.append(p)
    return out


def test_parquet_columns_and_keys(parquet_files: list[Path]) -> None:
    r = ParquetReader()
    q = closed_queue(*parquet_files)
    keys, cols = r.read_up_to(q, 120)
    assert keys[0] == f"{parquet_files[0]}:0".encode() and len(keys) == 120
    np.testing.assert_array_equal(cols["x"], np.arange(120, dtype=np.float32))
    sizes = [120]
    while True:
        try:
            k, _c = r.read_up_to(q, 120)
        except OutOfRangeError:
            break
        sizes.append(len(k))
    assert sizes == [120, 120, 10, 40]  # never mixes files (R5)


def test_parquet_select_columns_and_state(parquet_files: list[Path]) -> None:
    r = ParquetReader(columns=["x"])
    q = closed_queue(parquet_files[0], parquet_files[2])
    r.read_up_to(q, 130)
    state = r.state_dict()
    r2 = ParquetReader(columns=["x"])
    r2.load_state_dict(state)
    _keys, cols = r2.read_up_to(q, 1000)
    assert list(cols) == ["x"]
    np.testing.assert_array_equal(cols["x"], np.arange(130, 250, dtype=np.float32))


def test_parquet_corrupt_and_missing(tmp_path: Path, parquet_files: list[Path]) -> None:
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"not parquet at all")
    r = ParquetReader()
    q = closed_queue(bad, tmp_path / "missing.parquet", parquet_files[2])
    with pytest.raises(DataLossError, match=r"bad.parquet: not a readable Parquet file"):
        r.read(q)
    with pytest.raises(NotFoundError, match=r"missing.parquet; No such file or directory$"):
        r.read(q)
    _key, row = r.read(q)
    assert row["x"] == 2000.0
