"""decode_csv's cheaper block path (issue 22): column views of pyarrow's
buffers, cached column specs, pyarrow's thread pool only for a lone parse.
Results must stay those of the per-record path (D1-D8)."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

import feedq.readers._csv as csv_mod
from feedq.errors import InvalidArgumentError
from feedq.queues import FIFOQueue
from feedq.readers import TextLineReader, decode_csv

pytestmark = pytest.mark.timeout(20)

DEFAULTS: list = [[0], [0.0], [np.float64(0)], [np.int64(0)], [""]]


def closed_queue(*paths: Path) -> FIFOQueue:
    q = FIFOQueue(capacity=-1, dtypes=["string"], shapes=[[]])
    q.enqueue_many([[str(p) for p in paths]])
    q.close()
    return q


def _lines(n: int, seed: int = 0) -> bytes:
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        f = "" if i % 7 == 3 else f"{rng.standard_normal():.{i % 8}f}"
        rows.append(f"{i},{f},{rng.random()},{-i * 3},s{i}\n")
    return "".join(rows).encode()


def _blocks(tmp_path: Path, n: int, per_block: int) -> list:
    p = tmp_path / "c.csv"
    p.write_bytes(_lines(n))
    out = []
    with TextLineReader() as r:
        q = closed_queue(p)
        while True:
            b = r.read_block(q, per_block)
            if not len(b):
                break
            out.append(b)
            if sum(len(x) for x in out) == n:
                break
    return out


def _per_record(records, defaults):
    orig = csv_mod._arrow_block
    csv_mod._arrow_block = lambda *a, **k: None
    try:
        return decode_csv(records, defaults)
    finally:
        csv_mod._arrow_block = orig


def _same(a: list[np.ndarray], b: list[np.ndarray]) -> None:
    assert [x.dtype for x in a] == [y.dtype for y in b]
    for x, y in zip(a, b):
        if x.dtype.kind == "f":
            np.testing.assert_array_equal(x, y)
        else:
            assert x.tolist() == y.tolist()


def test_columns_are_writable_and_independent(tmp_path: Path) -> None:
    (block,) = _blocks(tmp_path, 500, 500)
    first = decode_csv(block, DEFAULTS)
    again = decode_csv(block, DEFAULTS)
    _same(first, _per_record(block.values(), DEFAULTS))
    for col in first:
        assert col.flags.writeable
        col[:] = col[0]  # writing one call's columns changes nothing else
    _same(again, _per_record(block.values(), DEFAULTS))
    assert first[0].tolist() == [0] * 500 and again[0].tolist() == list(range(500))


def test_a_filled_column_is_written_into_as_well(tmp_path: Path) -> None:
    (block,) = _blocks(tmp_path, 50, 50)  # column 1 has empty fields: fill_null's array
    out = decode_csv(block, [[0], [-1.5], [0.0], [0], [""]])
    assert out[1][3] == np.float32(-1.5)
    out[1] += 1
    assert out[1][3] == np.float32(-0.5)


@pytest.mark.parametrize(
    "zero, neg_zero", [([0.0], [-0.0]), ([np.float32(0.0)], [np.float32(-0.0)])]
)
def test_cached_specs_tell_minus_zero_from_zero(zero: list, neg_zero: list) -> None:
    recs = [b"1,", b"2,"]
    a = decode_csv(recs, [[0], zero])[1]
    b = decode_csv(recs, [[0], neg_zero])[1]
    c = decode_csv(recs, [[0], zero])[1]
    assert not np.signbit(a).any() and np.signbit(b).all() and not np.signbit(c).any()


def test_cached_specs_tell_types_apart() -> None:
    recs = [b"1,", b"2,"]
    assert decode_csv(recs, [[0], [1]])[1].dtype == np.int32
    assert decode_csv(recs, [[0], [1.0]])[1].dtype == np.float32
    assert decode_csv(recs, [[0], ["1"]])[1].tolist() == [b"1", b"1"]
    assert decode_csv(recs, [[0], [b"1"]])[1].tolist() == [b"1", b"1"]
    for _ in range(2):  # errors are not cached away
        with pytest.raises(TypeError, match="bool"):
            decode_csv(recs, [[0], [True]])
        with pytest.raises(InvalidArgumentError, match="There should only be 1 default per field"):
            decode_csv(recs, [[0], [1, 2]])
    nan = decode_csv(recs, [[0], [float("nan")]])[1]
    assert np.isnan(nan).all()


def test_the_spec_cache_is_bounded() -> None:
    for i in range(csv_mod._SPECS_MAX + 10):
        assert decode_csv([b",1", b",2"], [[i], [0]])[0].tolist() == [i, i]
    assert len(csv_mod._SPECS) <= csv_mod._SPECS_MAX


def test_the_pool_is_for_a_lone_parse(monkeypatch: pytest.MonkeyPatch) -> None:
    import pyarrow as pa

    monkeypatch.setattr(csv_mod._decoding, "count", 1)  # this call alone
    assert csv_mod._pool_helps() is (pa.cpu_count() > 1)
    monkeypatch.setattr(csv_mod._decoding, "count", 2)  # another thread parses too
    assert csv_mod._pool_helps() is False


def test_parses_in_flight_are_counted_and_released(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[int] = []
    orig = csv_mod._pool_helps

    def spy() -> bool:
        seen.append(csv_mod._decoding.count)
        return orig()

    monkeypatch.setattr(csv_mod, "_pool_helps", spy)
    decode_csv([b"1,2", b"3,4"], [[0], [0]])
    with pytest.raises(InvalidArgumentError):
        decode_csv([b"1,2", b"3,y"], [[0], [0]])  # pyarrow gives way; the per-record path raises
    assert seen == [1, 1] and csv_mod._decoding.count == 0


def test_concurrent_decodes_equal_sequential(tmp_path: Path) -> None:
    blocks = _blocks(tmp_path, 6000, 1000)
    want = [_per_record(b.values(), DEFAULTS) for b in blocks]
    errors: list[BaseException] = []
    start = threading.Barrier(3)

    def work() -> None:
        try:
            start.wait(timeout=5)
            for _ in range(3):
                for b, w in zip(blocks, want):
                    _same(decode_csv(b, DEFAULTS), w)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, name=f"decode-{i}") for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=15)
    assert not any(t.is_alive() for t in threads)
    assert not errors, errors
    assert csv_mod._decoding.count == 0


def test_cached_options_follow_every_setting() -> None:
    # The pyarrow options are made once per setting: alternating settings
    # must still give each call its own (the per-record path says what).
    recs = [b"1;NA;3", b"4;5;NA", b"7;8;9"]
    comma = [r.replace(b";", b",") for r in recs]
    cases = [
        (comma, dict(record_defaults=[[0], [0], [0]])),
        (comma, dict(record_defaults=[[0], [-1], [-2]], na_value="NA")),
        (recs, dict(record_defaults=[[0], [-1], [-2]], na_value="NA", field_delim=";")),
        (recs, dict(record_defaults=[[0], [-2]], na_value="NA", field_delim=";", select_cols=[0, 2])),
        (recs, dict(record_defaults=[[0.5], [""]], na_value="NA", field_delim=";", select_cols=[1, 2])),
        (comma, dict(record_defaults=[[0], ["d"], ["e"]], na_value="NA")),
        (comma, dict(record_defaults=[[0], [""], [""]])),  # "NA" is text here, not empty
    ]
    for _ in range(2):
        for records, kw in cases:
            try:
                want: object = _per_record_kw(records, kw)
            except InvalidArgumentError as exc:
                want = exc.message
            try:
                got: object = decode_csv(records, **kw)
            except InvalidArgumentError as exc:
                got = exc.message
            if isinstance(want, str):
                assert got == want, kw
            else:
                assert isinstance(got, list)
                _same(got, want)  # type: ignore[arg-type]


def _per_record_kw(records, kw):
    orig = csv_mod._arrow_block
    csv_mod._arrow_block = lambda *a, **k: None
    try:
        return decode_csv(records, **kw)
    finally:
        csv_mod._arrow_block = orig
