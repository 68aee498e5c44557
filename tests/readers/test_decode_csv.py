"""decode_csv (spec D1-D8): semantics, TF messages, and the pyarrow block path
giving the same results as the per-record path on tricky inputs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import feedq.readers._csv as csv_mod
from feedq.errors import InvalidArgumentError
from feedq.queues import STRING, FIFOQueue
from feedq.readers import TextLineReader, decode_csv

pytestmark = pytest.mark.timeout(10)


def per_record(records, defaults, **kw):
    """The reference path alone (the pyarrow path switched off)."""
    orig = csv_mod._arrow_block
    csv_mod._arrow_block = lambda *a, **k: None
    try:
        return decode_csv(records, defaults, **kw)
    finally:
        csv_mod._arrow_block = orig


def same(a: list[np.ndarray], b: list[np.ndarray]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.dtype == y.dtype and x.shape == y.shape
        if x.dtype.kind == "f":
            np.testing.assert_array_equal(x, y)  # NaN == NaN here
        else:
            assert x.tolist() == y.tolist()


def test_d1_dtypes_follow_defaults_and_shape_follows_records() -> None:
    out = decode_csv([["1,2.5,a"], ["3,4,b"]], [[0], [0.0], [""]])
    assert [o.dtype for o in out] == [np.int32, np.float32, object]
    assert all(o.shape == (2, 1) for o in out)
    assert out[2].tolist() == [[b"a"], [b"b"]]
    scalar = decode_csv(b"7,8.5,x", [np.int64(0), np.float64(0), b""])
    assert scalar[0].shape == () and scalar[0].dtype == np.int64 and scalar[1].dtype == np.float64


def test_d2_defaults_fill_empty_fields_and_required_columns() -> None:
    out = decode_csv(["1,,", ",2.5,x"], [[9], [7.5], ["d"]])
    assert out[0].tolist() == [1, 9] and out[1].tolist() == [7.5, 2.5] and out[2].tolist() == [b"d", b"x"]
    with pytest.raises(InvalidArgumentError, match=r"^Field 1 is required but missing in record 0!$"):
        decode_csv(["1,,x"], [[0], np.array([], np.float32), [""]])
    with pytest.raises(InvalidArgumentError, match=r"^Field 0 is required but missing in record 1!$"):
        decode_csv(["1,2", ",3"], [[], [0]])  # [] is a required float32 column, as in TF


def test_d2_two_defaults_is_an_error() -> None:
    with pytest.raises(ValueError, match=r"^There should only be 1 default per field but field 0 has 2$"):
        decode_csv(["1"], [[1, 2]])


@pytest.mark.parametrize(
    ("records", "message"),
    [
        (["1,2"], "Expect 3 fields but have 2 in record 0"),
        (["1,2,3", "1,2,3,4"], "Expect 3 fields but have 4 in record 1"),
        ([""], "Expect 3 fields but have 0 in record 0"),
    ],
)
def test_d3_field_count(records: list[str], message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=rf"^{message}$"):
        decode_csv(records, [[0], [0], [0]])


def test_d3_empty_record_with_one_column_is_an_error() -> None:
    with pytest.raises(InvalidArgumentError, match=r"^Expect 1 fields but have 0 in record 0$"):
        decode_csv([""], [[0.0]])


@pytest.mark.parametrize(
    ("field", "default", "value"),
    [(" 1 ", 0, 1), ("+7", 0, 7), ("-0", 0, 0), ("\t12", np.int64(0), 12), ("00012", 0, 12)],
)
def test_d4_valid_ints(field: str, default, value: int) -> None:
    assert decode_csv([field, field], [[default]])[0].tolist() == [value, value]


@pytest.mark.parametrize(
    ("field", "type_name"),
    [("1.5", "int32"), ("1 2", "int32"), ("0x1", "int32"), (" ", "int32"), ("3000000000", "int32"),
     ("9223372036854775808", "int64"), ("abc", "float"), ("1.5x", "float"), ("1_0", "float"), (".", "double")],
)
def test_d4_invalid_numbers(field: str, type_name: str) -> None:
    default = {"int32": 0, "int64": np.int64(0), "float": 0.0, "double": np.float64(0)}[type_name]
    with pytest.raises(InvalidArgumentError, match=rf"^Field 0 in record 0 is not a valid {type_name}: "):
        decode_csv([field], [[default]])
    # The same on the block path (several records: one pyarrow call), naming
    # the record at fault.
    with pytest.raises(InvalidArgumentError, match=rf"^Field 0 in record 2 is not a valid {type_name}: "):
        decode_csv(["1", "2", field, "3"], [[default]])


@pytest.mark.parametrize("field", ["0x10", "0X1f", "-0x2"])
def test_d4_hex_ints_are_errors_in_a_reader_block(tmp_path: Path, field: str) -> None:
    path = tmp_path / "hex.csv"
    path.write_text(f"1,a\n2,b\n{field},c\n4,d\n")
    q = FIFOQueue(-1, [STRING], shapes=[[]])
    q.enqueue(str(path))
    q.close()
    with TextLineReader() as reader:
        block = reader.read_block(q, 100)
    with pytest.raises(InvalidArgumentError, match=rf"not a valid int32: {field}"):
        decode_csv(block, [[0], [""]])
    assert decode_csv(block, [[0.0], [""]])[0].shape == (4,)  # a float column may be hex (D4)


@pytest.mark.parametrize(
    ("field", "value"),
    [("1.5", 1.5), (".5", 0.5), ("5.", 5.0), ("1e5", 1e5), ("-.5e-3", -0.0005), ("nan", np.nan),
     ("-inf", -np.inf), ("INF", np.inf), ("Infinity", np.inf), ("+1.5", 1.5), (" 1.5 ", 1.5),
     ("1e400", np.inf), ("0x10", 16.0), ("nan(12)", np.nan)],
)
def test_d4_valid_floats(field: str, value: float) -> None:
    # Verified against TF 2.21 (strtod-like parsing).
    np.testing.assert_array_equal(decode_csv([field, field], [[0.0]])[0], np.float32([value, value]))


def test_d4_strings_are_verbatim() -> None:
    assert decode_csv([" a ,b"], [[""], [""]])[0].tolist() == [b" a "]


def test_d5_field_delim_one_char() -> None:
    assert decode_csv(["1\t2"], [[0], [0]], field_delim="\t")[1].tolist() == [2]
    with pytest.raises(InvalidArgumentError, match=r"^field_delim should be only 1 char$"):
        decode_csv(["1"], [[0]], field_delim=";;")


@pytest.mark.parametrize(
    ("record", "expected"),
    [('"a,b",1', [b"a,b", 1]), ('"say ""hi""",2', [b'say "hi"', 2]), ('"",3', [b"dflt", 3]),
     ('x,"12"', [b"x", 12]), ("\ra,1", [b"a", 1])],
)
def test_d6_quotes(record: str, expected: list) -> None:
    out = decode_csv([record, record], [["dflt"], [0]])
    assert [o.tolist()[0] for o in out] == expected


@pytest.mark.parametrize(
    ("record", "message"),
    [('a"b,1', "Unquoted fields cannot have quotes/CRLFs inside in record 1"),
     ('"a"x,1', "Quote inside a string has to be escaped by another quote in record 1"),
     ('"abc,1', "Quoted field has to end with quote followed by delim or end in record 1"),
     ("a\rb,1", "Unquoted fields cannot have quotes/CRLFs inside in record 1")],
)
def test_d6_quote_errors_name_the_record(record: str, message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=rf"^{message}$"):
        decode_csv(["ok,1", record], [[""], [0]])


def test_d6_no_quote_delim_treats_quotes_as_text() -> None:
    out = decode_csv(['"a,b",c'], [[""], [""], [""]], use_quote_delim=False)
    assert [o.tolist() for o in out] == [[b'"a'], [b'b"'], [b"c"]]


def test_d7_na_value() -> None:
    out = decode_csv(["NA,1", '"NA",NA'], [["z"], [5]], na_value="NA")
    assert out[0].tolist() == [b"z", b"z"] and out[1].tolist() == [1, 5]
    with pytest.raises(InvalidArgumentError, match=r"^Field 0 in record 0 is not a valid int32: NA$"):
        decode_csv(["NA"], [[0]])
    with pytest.raises(InvalidArgumentError, match=r"^Field 0 is required but missing in record 0!$"):
        decode_csv(["NA"], [np.array([], np.int32)], na_value="NA")


def test_d8_select_cols() -> None:
    out = decode_csv(["1,x,3,junk", "4,y,6,more"], [[0], [0]], select_cols=[0, 2])
    assert out[0].tolist() == [1, 4] and out[1].tolist() == [3, 6]
    # Unselected columns are not parsed; extra trailing columns ignored.
    assert decode_csv(['1,"bad', "2"], [[0]], select_cols=[0])[0].tolist() == [1, 2]
    with pytest.raises(InvalidArgumentError, match=r"^Expect 2 fields but have 1 in record 0$"):
        decode_csv(["1"], [[0], [0]], select_cols=[0, 2])
    with pytest.raises(ValueError, match=r"^select_cols is not strictly increasing\.$"):
        decode_csv(["1"], [[0], [0]], select_cols=[1, 0])
    with pytest.raises(ValueError, match=r"^Length of select_cols and record_defaults do not match\.$"):
        decode_csv(["1"], [[0], [0]], select_cols=[1])


TRICKY = [
    ["1,2.5,a", "2,nan,b", "3,-inf,", "4,1e3,\"q,\"\"x\"\"\""],
    [" 1 ,2.5,a", "2, 3 ,b"],
    ["1,,a", ",2,b"],
    ["1,2,NA", "NA,3,x"],
    ["1,2,a", "2,3"],
    ["1,2,a\r", "2,3,b"],
    ['1,2,"a', 'b",3,c'],
    ["1,2,a", "", "3,4,c"],
    ["1,2,a,extra", "2,3,b,extra"],
    ['1,2," a"', '2,3, "a"'],
    ["1,2,a", "2,x,b"],
    ["1,Infinity,a", "2,0x10,b"],
    ["99999999999,1,a"],
    ["1,1.5,a;b", "2,2,c"],
]


@pytest.mark.parametrize("records", TRICKY)
@pytest.mark.parametrize("na", ["", "NA"])
def test_block_path_equals_per_record_path(records: list[str], na: str) -> None:
    defaults = [[0], [0.0], ["d"]]
    try:
        want = per_record(records, defaults, na_value=na)
    except InvalidArgumentError as exc:
        with pytest.raises(InvalidArgumentError, match=f"^{__import__('re').escape(exc.message)}$"):
            decode_csv(records, defaults, na_value=na)
        return
    same(decode_csv(records, defaults, na_value=na), want)


def closed_queue(*names: str | Path) -> FIFOQueue:
    q = FIFOQueue(capacity=-1, dtypes=["string"], shapes=[[]])
    q.enqueue_many([[str(n) for n in names]])
    q.close()
    return q


@pytest.mark.parametrize("records", TRICKY)
def test_reader_block_path_equals_per_record_path(tmp_path: Path, records: list[str]) -> None:
    p = tmp_path / "t.csv"
    p.write_bytes(("hdr\r\n" + "\r\n".join(records) + "\n").encode())
    with TextLineReader(skip_header_lines=1) as r:
        block = r.read_block(closed_queue(p), 100)
    defaults = [[0], [0.0], ["d"]]
    try:
        want = per_record(block, defaults)  # both paths name the record by its key
    except InvalidArgumentError as exc:
        with pytest.raises(InvalidArgumentError, match=f"^{__import__('re').escape(exc.message)}$"):
            decode_csv(block, defaults)
        return
    same(decode_csv(block, defaults), want)


def test_block_path_really_uses_pyarrow(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    p = tmp_path / "t.csv"
    p.write_bytes(b"".join(b"%d,%d.5,s%d\n" % (i, i, i) for i in range(1000)))
    calls = []
    orig = csv_mod._arrow_block
    monkeypatch.setattr(csv_mod, "_arrow_block", lambda *a: calls.append(1) or orig(*a))
    monkeypatch.setattr(csv_mod, "_per_record", None)  # would fail if used
    with TextLineReader() as r:
        block = r.read_block(closed_queue(p), 1000)
    a, b, c = decode_csv(block, [[0], [0.0], [""]])
    assert calls and a.tolist() == list(range(1000)) and c[-1] == b"s999"
    assert a.flags.writeable and b.flags.writeable


# ------------------------------------------- errors name file:line (issue 11)


def _deep_csv(tmp_path: Path, bad_line: int, bad: str, total: int = 20_010) -> Path:
    """A CSV with a header and ``total`` physical lines; line ``bad_line`` is ``bad``."""
    lines = ["a,b,c"] + [f"{i},{i}.5,s{i}" for i in range(2, total + 1)]
    lines[bad_line - 1] = bad
    p = tmp_path / "deep.csv"
    p.write_text("\n".join(lines) + "\n")
    return p


def _first_error(p: Path, defaults: list, decode=decode_csv, **kw) -> str:
    with TextLineReader(skip_header_lines=1, **kw) as r:
        q = closed_queue(p)
        while True:
            block = r.read_block(q, 4096)
            try:
                decode(block, defaults)
            except InvalidArgumentError as exc:
                return exc.message


@pytest.mark.parametrize("bad, message", [
    ("20001,abc,x", "Field 1 in {p}:20002 is not a valid float: abc"),
    ("20001,2.5", "Expect 3 fields but have 2 in {p}:20002"),
    (",2.5,x", "Field 0 is required but missing in {p}:20002!"),
    ('20001,2.5,"x', "Quoted field has to end with quote followed by delim or end in {p}:20002"),
    ('20001,2.5,x"y', "Unquoted fields cannot have quotes/CRLFs inside in {p}:20002"),
])
def test_block_errors_name_the_file_and_physical_line(tmp_path: Path, bad: str, message: str) -> None:
    # Before: "... in record 3616" (the line's place in its 4096-line block), no file.
    p = _deep_csv(tmp_path, 20_002, bad)
    defaults = [[], [0.0], [""]]
    want = message.format(p=p)
    assert _first_error(p, defaults) == want  # pyarrow first, then the per-record path
    assert _first_error(p, defaults, decode=per_record) == want  # per-record path alone


def test_fast_and_fallback_paths_give_the_same_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = _deep_csv(tmp_path, 20_002, "20001,abc,x")
    want = f"Field 1 in {p}:20002 is not a valid float: abc"
    calls: list[bool] = []
    orig = csv_mod._arrow_block
    monkeypatch.setattr(csv_mod, "_arrow_block", lambda *a: calls.append(True) or orig(*a))
    assert _first_error(p, [[0], [0.0], [""]]) == want
    assert calls  # the pyarrow path did see the block (and gave way to the reference)
    # A line pyarrow's guard rejects up front (a stray quote) sends the whole
    # block to the per-record path: the same message.
    q = _deep_csv(tmp_path, 20_002, "20001,abc,x")
    text = q.read_text().replace("20000,20000.5,s20000", '20000,20000.5,"s20000"')
    q.write_text(text)
    assert _first_error(q, [[0], [0.0], [""]]) == want


def test_gzip_text_blocks_name_lines_too(tmp_path: Path) -> None:
    import gzip

    p = _deep_csv(tmp_path, 9_000, "8999,x,y")
    gz = tmp_path / "deep.csv.gz"
    gz.write_bytes(gzip.compress(p.read_bytes()))
    want = f"Field 1 in {gz}:9000 is not a valid float: x"
    assert _first_error(gz, [[0], [0.0], [""]], compression="GZIP") == want


def test_plain_records_keep_in_record_k() -> None:
    records = [f"{i},{i}.5,s" for i in range(5000)]
    records[4321] = "4321,abc,s"
    with pytest.raises(InvalidArgumentError, match=r"^Field 1 in record 4321 is not a valid float: abc$"):
        decode_csv(records, [[0], [0.0], [""]])
    with pytest.raises(InvalidArgumentError, match=r"^Field 1 in record 4321 is not a valid float: abc$"):
        per_record(records, [[0], [0.0], [""]])


def test_whole_file_and_tfrecord_blocks_are_named_by_their_keys(tmp_path: Path) -> None:
    from feedq.readers import TFRecordReader, TFRecordWriter, WholeFileReader

    w = tmp_path / "one.csv"
    w.write_bytes(b"1,x")
    with WholeFileReader() as r:
        block = r.read_block(closed_queue(w), 1)
    with pytest.raises(InvalidArgumentError, match=rf"^Field 1 in {w} is not a valid int32: x$"):
        decode_csv(block, [[0], [0]])
    t = tmp_path / "rows.tfrecord"
    with TFRecordWriter(t) as tw:
        tw.write_many([b"1,2", b"3,y"])
    with TFRecordReader() as r:
        block = r.read_block(closed_queue(t), 10)
    with pytest.raises(InvalidArgumentError, match=rf"^Field 1 in {t}:19 is not a valid int32: y$"):
        decode_csv(block, [[0], [0]])  # key = file:byte offset of the record (R13)


@pytest.mark.parametrize("defaults", [
    [[[1]], [0]],
    [[0], [[]]],
    [np.zeros((1, 1), np.int32), [0]],
    [[0], np.array([[b"a"]])],
])
def test_rank_2_record_defaults_are_invalid_argument(defaults: list) -> None:
    with pytest.raises(InvalidArgumentError, match=r"^record_defaults\[\d\] must be at most rank 1 .* but is rank 2$"):
        decode_csv(["1,2"], defaults)


def test_rank_0_and_1_record_defaults_still_work() -> None:
    out = decode_csv(["1,2", "3,"], [np.int64(0), np.array([7], np.int32)])
    assert out[0].tolist() == [1, 3] and out[1].tolist() == [2, 7]
    assert decode_csv(["1"], [[]])[0].dtype == np.float32
