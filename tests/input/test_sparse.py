"""Sparse components through the batchers (B12): VarLenFeature values batched
as one SparseTensorValue, through shuffle_batch and enqueue_many."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import numpy as np
import pytest

import feedq
from feedq.errors import OutOfRangeError

pytestmark = pytest.mark.timeout(30)


@pytest.fixture(autouse=True)
def _clean_collections() -> Iterator[None]:
    feedq.clear_queue_runners()
    yield
    feedq.clear_queue_runners()


def _tagged_records(n: int) -> list[bytes]:
    """Serialized Examples: record i has label i and tags 10*i .. 10*i + i%4 - 1
    (none when i % 4 == 0: the feature is then absent)."""
    from feedq import readers

    out = []
    for i in range(n):
        feats = {"label": np.array([i], np.int64)}
        if i % 4:
            feats["tags"] = np.arange(10 * i, 10 * i + i % 4, dtype=np.int64)
        out.append(readers.serialize_example(feats))
    return out


def _tags_of(label: int) -> list[int]:
    return list(range(10 * label, 10 * label + label % 4))


def _record_reader(records: list[bytes]):
    """A callable parsing one record per call (VarLenFeature -> sparse), then OutOfRange."""
    from feedq import readers

    features = {"tags": readers.VarLenFeature(np.int64), "label": readers.FixedLenFeature([], np.int64)}
    it = iter(records)
    lock = threading.Lock()

    def read() -> dict:
        with lock:
            try:
                rec = next(it)
            except StopIteration:
                raise OutOfRangeError("no more records") from None
        return readers.parse_single_example(rec, features)

    return read


SPARSE_DTYPES = {"tags": __import__("feedq").readers.VarLenFeature(np.int64), "label": np.int64}


SPARSE_SHAPES = {"tags": [None], "label": []}


def _expected_sparse(labels: list[int]) -> tuple[list[list[int]], list[int], list[int]]:
    """TF1's batched SparseTensor of the tags of `labels`: indices, values, dense_shape."""
    rows = [_tags_of(v) for v in labels]
    indices = [[r, j] for r, row in enumerate(rows) for j in range(len(row))]
    values = [x for row in rows for x in row]
    return indices, values, [len(rows), max((len(r) for r in rows), default=0)]


def test_b12_sparse_component_batched_as_one_sparse_value() -> None:
    """A VarLenFeature result through batch(): one SparseTensorValue per batch,
    indices [row, position], values in order, dense_shape [batch, max len]
    (TF1's batching of a SparseTensor; the layout was compared by hand with
    TF 2.21's compat.v1 train.batch)."""
    from feedq import readers

    with feedq.Pipeline():
        b = feedq.batch(_record_reader(_tagged_records(7)), 3, dtypes=SPARSE_DTYPES, shapes=SPARSE_SHAPES,
                        allow_smaller_final_batch=True)
        assert b.dtypes == [np.dtype(np.int64), np.dtype(np.int64)]
        assert b.output_shapes == [(None,), (None, None)]  # label, tags
        batches = list(b)
    assert [x["label"].tolist() for x in batches] == [[0, 1, 2], [3, 4, 5], [6]]
    first = batches[0]["tags"]
    assert isinstance(first, readers.SparseTensorValue)
    assert first.indices.tolist() == [[1, 0], [2, 0], [2, 1]]
    assert first.values.tolist() == [10, 20, 21]
    assert first.dense_shape.tolist() == [3, 2]
    assert first.indices.dtype == np.int64 and first.dense_shape.dtype == np.int64
    for x in batches:
        tags = x["tags"]
        indices, values, shape = _expected_sparse(x["label"].tolist())
        assert (tags.indices.tolist(), tags.values.tolist(), tags.dense_shape.tolist()) == (indices, values, shape)
    assert len(b._sparse_table) == 0  # every value left the side table with its batch


def test_b12_sparse_component_through_shuffle_batch_stays_with_its_element() -> None:
    with feedq.Pipeline():
        b = feedq.shuffle_batch(_record_reader(_tagged_records(40)), 4, capacity=30, min_after_dequeue=10,
                                seed=7, dtypes=SPARSE_DTYPES, shapes=SPARSE_SHAPES,
                                allow_smaller_final_batch=True)
        batches = list(b)
    labels = [v for x in batches for v in x["label"].tolist()]
    assert sorted(labels) == list(range(40)) and labels != list(range(40))
    for x in batches:
        tags = x["tags"]
        indices, values, shape = _expected_sparse(x["label"].tolist())
        assert tags.indices.tolist() == indices
        assert tags.values.tolist() == values
        assert tags.dense_shape.tolist() == shape


def test_b12_sparse_blocks_with_enqueue_many_and_batches_of_batches() -> None:
    """enqueue_many: a parse_example block's sparse value is cut into rows
    (dense_shape[1:] each, as TF1) and re-batched; a batch stage of sparse
    values can feed another batcher."""
    from feedq import readers

    records = _tagged_records(10)
    features = {"tags": readers.VarLenFeature(np.int64), "label": readers.FixedLenFeature([], np.int64)}
    blocks = iter([records[0:4], records[4:7], records[7:10]])
    lock = threading.Lock()

    def read_block() -> dict:
        with lock:
            try:
                block = next(blocks)
            except StopIteration:
                raise OutOfRangeError("done") from None
        return readers.parse_example(block, features)

    with feedq.Pipeline():
        rows = feedq.batch(read_block, 3, enqueue_many=True, dtypes=SPARSE_DTYPES, shapes=SPARSE_SHAPES,
                           allow_smaller_final_batch=True)
        again = feedq.batch(rows, 5, enqueue_many=True, allow_smaller_final_batch=True)
        batches = list(again)
    assert [x["label"].tolist() for x in batches] == [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]]
    for x in batches:
        tags = x["tags"]
        indices, values, _ = _expected_sparse(x["label"].tolist())
        assert (tags.indices.tolist(), tags.values.tolist()) == (indices, values)
    # A row keeps the width of the batch it came in (TF1), not its own length.
    assert batches[0]["tags"].dense_shape.tolist() == [5, 3]
    assert batches[1]["tags"].dense_shape.tolist() == [5, 3]


def test_b12_sparse_component_errors() -> None:
    from feedq import readers

    with pytest.raises(ValueError, match=r"shared queue"):
        feedq.batch(_record_reader(_tagged_records(2)), 2, dtypes=SPARSE_DTYPES, shapes=SPARSE_SHAPES,
                    shared_name="shared")
    with pytest.raises(ValueError, match=r"^batch: sparse component 1 needs a shape of rank >= 1"):
        feedq.batch(lambda: [1, None], 2, dtypes=[np.int64, readers.VarLenFeature(np.int64)], shapes=[[], []])
    not_sparse = r"^batch: component 'tags' is sparse: expected a SparseTensorValue, got ndarray$"
    with pytest.raises(feedq.errors.InvalidArgumentError, match=not_sparse), feedq.Pipeline():
        b = feedq.batch(lambda: {"tags": np.arange(3), "label": 1}, 2, dtypes=SPARSE_DTYPES,
                        shapes=SPARSE_SHAPES)
        b.dequeue(timeout=5)
