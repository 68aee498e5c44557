"""Corrupt Parquet row groups (project issue 11, spec X6).

pyarrow decoded batches that spanned row groups and checked nothing: invalid
UTF-8 in a string column surfaced later as a raw ``pyarrow.lib.ArrowException``
from ``values()``, after the reader had moved past the rows, which were lost.
Now each row group is read and validated whole: a bad one is a
``DataLossError`` naming the file and the row group, after the rows before
it; ``on_error="skip"`` counts it and reads on with the next row group.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from feedq.errors import DataLossError, OutOfRangeError
from feedq.queues import FIFOQueue
from feedq.readers import ParquetReader

pytestmark = pytest.mark.timeout(30)

SCHEMA = pa.schema([("i", pa.int64()), ("s", pa.string())])


def closed_queue(*names: str | Path) -> FIFOQueue:
    q = FIFOQueue(capacity=-1, dtypes=["string"], shapes=[[]])
    q.enqueue_many([[str(n) for n in names]])
    q.close()
    return q


def _unchecked_strings(values: list[bytes]) -> pa.Array:
    """A string array over arbitrary bytes (pyarrow's casts would validate them)."""
    raw = pa.array(values, pa.binary())
    return pa.Array.from_buffers(pa.string(), len(raw), raw.buffers())


def write_groups(path: Path, groups: list[list[bytes]]) -> Path:
    """One row group per list; column ``i`` numbers the rows 0, 1, ..."""
    first = 0
    with pq.ParquetWriter(path, SCHEMA, compression="none") as w:
        for rows in groups:
            ids = pa.array(range(first, first + len(rows)), pa.int64())
            w.write_table(pa.table({"i": ids, "s": _unchecked_strings(rows)}, schema=SCHEMA))
            first += len(rows)
    return path


GROUPS = [
    [b"a0", b"a1", b"a2", b"a3"],
    [b"b0", b"\xff\xfe bad utf-8", b"b2", b"b3"],
    [b"c0", b"c1", b"c2", b"c3"],
]


def drain(reader: ParquetReader, q: FIFOQueue, n: int) -> list[Any]:
    """``(key, i, s)`` per row, ``("ERR", message)`` where a read raised DataLossError."""
    out: list[Any] = []
    with reader:
        while True:
            try:
                keys, cols = reader.read_up_to(q, n)
            except DataLossError as exc:
                out.append(("ERR", exc.message))
                continue
            except OutOfRangeError:
                return out
            out += list(zip(keys.tolist(), cols["i"].tolist(), cols["s"].tolist()))


def rows(path: Path, ids: list[int]) -> list[tuple[bytes, int, str]]:
    flat = [s for g in GROUPS for s in g]
    return [(f"{path}:{i}".encode(), i, flat[i].decode()) for i in ids]


@pytest.mark.parametrize("n", [1, 3, 100])
def test_invalid_utf8_is_data_loss_naming_the_row_group_after_the_good_rows(
    tmp_path: Path, n: int
) -> None:
    bad = write_groups(tmp_path / "bad.parquet", GROUPS)
    good = write_groups(tmp_path / "good.parquet", [GROUPS[0]])
    out = drain(ParquetReader(), closed_queue(bad, good), n)
    err = out.index(next(o for o in out if o[0] == "ERR"))
    assert out[:err] == rows(bad, [0, 1, 2, 3])  # the rows before it, none lost
    assert out[err][1].startswith(f"{bad}: corrupt Parquet data in row group 1 (rows 4-7): ")
    assert "Invalid UTF8" in out[err][1]
    assert out[err + 1 :] == rows(good, [0, 1, 2, 3])  # then the next file (R9, X6)


def test_skip_counts_the_bad_row_group_and_reads_the_groups_after_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    bad = write_groups(tmp_path / "bad.parquet", GROUPS)
    reader = ParquetReader(on_error="skip")
    with caplog.at_level(logging.WARNING, logger="feedq.readers"):
        out = drain(reader, closed_queue(bad), 3)
    assert out == rows(bad, [0, 1, 2, 3, 8, 9, 10, 11])  # keys keep the true row numbers
    assert reader.num_errors_skipped() == 1
    assert reader.num_records_produced() == 8
    assert reader.num_work_units_completed() == 1
    assert f"skipped {bad}:4: {bad}: corrupt Parquet data in row group 1" in caplog.text


def test_values_of_every_block_delivered_are_valid(tmp_path: Path) -> None:
    # The old reader returned a block whose values() raised ArrowException.
    bad = write_groups(tmp_path / "bad.parquet", GROUPS)
    with ParquetReader(on_error="skip") as r:
        q = closed_queue(bad)
        seen = []
        while True:
            try:
                block = r.read_block(q, 100)
            except OutOfRangeError:
                break
            seen += block.values()["s"].tolist()
    assert seen == ["a0", "a1", "a2", "a3", "c0", "c1", "c2", "c3"]


def test_only_the_columns_read_are_checked(tmp_path: Path) -> None:
    bad = write_groups(tmp_path / "bad.parquet", GROUPS)
    with ParquetReader(columns=["i"]) as r:
        keys, cols = r.read_up_to(closed_queue(bad), 100)
    assert cols["i"].tolist() == list(range(12)) and len(keys) == 12


def test_a_corrupt_page_header_is_data_loss_naming_the_row_group(tmp_path: Path) -> None:
    ok = [[b"x%d" % i for i in range(g * 4, g * 4 + 4)] for g in range(3)]
    p = write_groups(tmp_path / "pages.parquet", ok)
    col = pq.ParquetFile(p).metadata.row_group(2).column(0)
    at = col.dictionary_page_offset or col.data_page_offset
    data = bytearray(p.read_bytes())
    data[at : at + 8] = b"\xff" * 8
    p.write_bytes(bytes(data))
    reader = ParquetReader(on_error="skip")
    out = drain(reader, closed_queue(p), 100)
    assert [o[1] for o in out] == list(range(8))
    assert reader.num_errors_skipped() == 1
    with ParquetReader() as r:
        q = closed_queue(p)
        assert r.read_up_to(q, 100)[1]["i"].tolist() == list(range(8))
        with pytest.raises(DataLossError, match=r"corrupt Parquet data in row group 2 \(rows 8-11\): "):
            r.read_up_to(q, 100)
        with pytest.raises(OutOfRangeError):  # reported once; the reader moved on
            r.read_up_to(q, 100)


def test_close_and_state_resume_after_a_skipped_row_group(tmp_path: Path) -> None:
    bad = write_groups(tmp_path / "bad.parquet", GROUPS)
    q = closed_queue(bad)
    r = ParquetReader(on_error="skip")
    assert r.read_up_to(q, 4)[1]["i"].tolist() == [0, 1, 2, 3]
    assert r.read_up_to(q, 2)[1]["i"].tolist() == [8, 9]
    state = r.state_dict()
    r.close()
    assert r.read_up_to(q, 100)[1]["i"].tolist() == [10, 11]  # reopened at row 10
    r2 = ParquetReader(on_error="skip")
    r2.load_state_dict(state)
    keys, cols = r2.read_up_to(q, 100)
    assert cols["i"].tolist() == [10, 11] and keys.tolist()[0] == f"{bad}:10".encode()
    r2.close()



def _mixed_file(path: Path) -> Path:
    """A small file with an int, a float and a string column, four row groups."""
    n = 40
    table = pa.table({
        "count": pa.array(range(n), pa.int64()),
        "score": pa.array([x / 3 for x in range(n)], pa.float64()),
        "label": pa.array([f"row {x} é" for x in range(n)], pa.string()),
    })
    pq.write_table(table, path, row_group_size=10, compression="none")
    return path


@pytest.mark.parametrize("seed", range(4))
def test_mutated_files_with_string_columns_give_only_data_loss(tmp_path: Path, seed: int) -> None:
    """Seeded byte mutations of a file with int, float and string columns give
    rows or a ``DataLossError`` naming the file, never another error (project
    issue 24: a column name that is no longer UTF-8 made ``pq.ParquetFile``
    raise ``UnicodeDecodeError``). A third of the mutations hit the whole
    file, a third the footer, a third its schema (the first 64 bytes, where
    the column names are). Bounded: 150 mutations per seed, no deadline."""
    import random

    raw = _mixed_file(tmp_path / "clean.parquet").read_bytes()
    footer = len(raw) - 8 - int.from_bytes(raw[-8:-4], "little")  # where the footer starts
    regions = [(0, len(raw)), (footer, len(raw) - 8), (footer, footer + 64)]
    rng = random.Random(seed)
    m = tmp_path / "m.parquet"
    outcomes = {"rows": 0, "data_loss": 0}
    for k in range(150):
        data = bytearray(raw)
        lo, hi = regions[k % 3]
        for _ in range(rng.randint(1, 3)):
            data[rng.randrange(lo, hi)] ^= rng.randint(1, 255)
        m.write_bytes(bytes(data))
        q = closed_queue(m)
        with ParquetReader() as r:
            while True:
                try:
                    _keys, cols = r.read_up_to(q, 7)
                except DataLossError as exc:
                    assert exc.message.startswith(f"{m}: "), exc.message
                    outcomes["data_loss"] += 1
                    continue
                except OutOfRangeError:
                    break
                outcomes["rows"] += 1
                assert all(len(c) == len(_keys) for c in cols.values())
    assert outcomes["data_loss"] and outcomes["rows"]
