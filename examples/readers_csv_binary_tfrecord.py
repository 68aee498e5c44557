"""Loading data directly from the graph -- the seed notebook's section, in feedq.

TF1 read files "from the graph" with reader ops: a filename queue feeds a
reader (TextLineReader reads a file line by line; each record's key is
"filename:linenumber"), and ``tf.decode_csv(value, record_defaults=[...])``
turns a line into typed columns. The same for fixed-length binary records
(FixedLengthRecordReader + decode_raw) and TFRecord files of tf.train.Example
(TFRecordReader + parse_example). This script does all three on files it
creates in a temporary directory, first record by record as in the seed, then
block by block (feedq's batch-first path). Runs in a few seconds.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np

from feedq.errors import OutOfRangeError
from feedq.queues import FIFOQueue
from feedq.readers import (
    FixedLenFeature,
    FixedLengthRecordReader,
    TextLineReader,
    TFRecordReader,
    TFRecordWriter,
    VarLenFeature,
    decode_csv,
    decode_raw,
    parse_example,
    serialize_example,
)

QUICK = os.environ.get("FEEDQ_EXAMPLE_QUICK") == "1"


def filename_queue(*paths: Path) -> FIFOQueue:
    """The filename queue: a FIFOQueue of scalar strings, filled and closed."""
    q = FIFOQueue(capacity=-1, dtypes=["string"], shapes=[[]], name="filename_queue")
    q.enqueue_many([[str(p) for p in paths]])
    q.close()  # readers raise OutOfRangeError once every file is read
    return q


def csv_demo(tmp: Path) -> None:
    # my_test.csv as in the seed: two features and a target per line.
    path = tmp / "my_test.csv"
    path.write_text("x1,x2,target\n1.0,2.0,0\n4.5,,1\n-7,3.5e2,1\n")

    # Record by record, as the seed does it.
    reader = TextLineReader(skip_header_lines=1)
    queue = filename_queue(path)
    try:
        while True:
            key, value = reader.read(queue)
            # record_defaults: a float default for x1 and x2 (used when a field
            # is empty, as x2 in line 3), int for the target.
            x1, x2, target = decode_csv(value, record_defaults=[[0.0], [-1.0], [0]])
            # The key names the file and the physical line: b".../my_test.csv:2".
            print(f"  {key.decode().rsplit('/', 1)[-1]:>14}  features=[{x1}, {x2}]  target={target}")
    except OutOfRangeError:
        pass  # no more records in the current file and no more files to read

    # Block by block: one pyarrow call parses every line of the block.
    reader = TextLineReader(skip_header_lines=1)
    block = reader.read_block(filename_queue(path), 1024)
    x1, x2, target = decode_csv(block, record_defaults=[[0.0], [-1.0], [0]])
    features = np.stack([x1, x2], axis=1)
    print(f"  block of {len(block)}: features {features.tolist()}, targets {target.tolist()}")


def binary_demo(tmp: Path) -> None:
    # Fixed-length records: a 1-byte label then 3 float32 features (13 bytes),
    # after a 4-byte file header, as in the CIFAR binary format.
    path = tmp / "data.bin"
    n = 1000 if QUICK else 100_000
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 10, n).astype(np.uint8)
    feats = rng.standard_normal((n, 3)).astype("<f4")
    rows = np.concatenate([labels[:, None], feats.view(np.uint8)], axis=1)
    path.write_bytes(b"HDR!" + rows.tobytes())

    reader = FixedLengthRecordReader(record_bytes=13, header_bytes=4)
    queue = filename_queue(path)
    total = 0
    while True:
        try:
            block = reader.read_block(queue, 4096)  # one buffer, no per-record objects
        except OutOfRangeError:
            break
        raw = block.fixed  # [k, 13] uint8 view of the read buffer
        label = raw[:, 0]
        x = decode_raw(np.ascontiguousarray(raw[:, 1:]), np.float32)  # [k, 3]
        assert np.array_equal(x, feats[total : total + len(block)])
        assert np.array_equal(label, labels[total : total + len(block)])
        total += len(block)
    print(f"  read {total} fixed-length records; first label {labels[0]}, features {feats[0].tolist()}")


def tfrecord_demo(tmp: Path) -> None:
    # TFRecords of tf.train.Example, written without TensorFlow (and readable by it).
    path = tmp / "data.tfrecord"
    n = 2000 if QUICK else 100_000
    with TFRecordWriter(path, "GZIP") as writer:
        for i in range(n):
            writer.write(serialize_example({"x": np.full(4, i, np.float32), "label": i % 3,
                                            "tags": np.arange(i % 4)}))
    reader = TFRecordReader(options="GZIP")
    queue = filename_queue(path)
    features = {"x": FixedLenFeature([4], np.float32), "label": FixedLenFeature([], np.int64),
                "tags": VarLenFeature(np.int64)}
    seen = 0
    while True:
        try:
            keys, values = reader.read_up_to(queue, 512)  # TF1 API: keys "file:offset"
        except OutOfRangeError:
            break
        batch = parse_example(values, features)
        seen += len(keys)
    print(f"  parsed {seen} Examples; last batch x[-1]={batch['x'][-1].tolist()}, "
          f"label[-1]={batch['label'][-1]}, tags dense_shape={batch['tags'].dense_shape.tolist()}")
    print(f"  first key {keys[0].decode().rsplit('/', 1)[-1]}")


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        print("CSV (TextLineReader + decode_csv):")
        csv_demo(Path(tmp))
        print("binary (FixedLengthRecordReader + decode_raw):")
        binary_demo(Path(tmp))
        print("TFRecords (TFRecordReader + parse_example):")
        tfrecord_demo(Path(tmp))


if __name__ == "__main__":
    main()
