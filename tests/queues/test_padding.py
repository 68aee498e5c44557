"""PaddingFIFOQueue: spec rules Q34–Q38."""

from __future__ import annotations

import numpy as np
import pytest

from feedq.errors import InvalidArgumentError, OutOfRangeError
from feedq.queues import PaddingFIFOQueue

pytestmark = pytest.mark.timeout(20)


@pytest.mark.parametrize("shapes", [None, [None], [None, 2], []])
def test_q34_shapes_required_with_known_rank(shapes: object) -> None:
    with pytest.raises(ValueError, match=r"^When providing partial shapes, a list of shapes must be provided\.$"):
        PaddingFIFOQueue(5, np.int32, shapes=shapes)


def test_q34_one_component_partial_shape() -> None:
    q = PaddingFIFOQueue(5, np.int32, shapes=[[None]])
    assert q.shapes == [(None,)]


def test_q35_rank_and_fixed_dims_checked() -> None:
    q = PaddingFIFOQueue(5, np.int32, shapes=[[None, 2]])
    with pytest.raises(
        InvalidArgumentError,
        match=r"^Shape mismatch in tuple component 0\. Expected \[\?,2\], got \[1,1,1\]$",
    ):
        q.enqueue(np.zeros((1, 1, 1), np.int32))
    with pytest.raises(InvalidArgumentError, match=r"Expected \[\?,2\], got \[1,3\]"):
        q.enqueue(np.zeros((1, 3), np.int32))
    assert q.size() == 0


def test_q36_dequeue_returns_own_shape() -> None:
    q = PaddingFIFOQueue(5, np.int32, shapes=[[None]])
    q.enqueue(np.arange(3, dtype=np.int32))
    np.testing.assert_array_equal(q.dequeue(), [0, 1, 2])


def test_q37_pad_to_batch_max() -> None:
    q = PaddingFIFOQueue(5, [np.int32, str, bool], shapes=[[None], [None], [None, 2]])
    q.enqueue([np.arange(1, dtype=np.int32), ["a"], np.ones((1, 2), bool)])
    q.enqueue([np.arange(3, dtype=np.int32), ["a", "b"], np.ones((3, 2), bool)])
    ints, strs, bools = q.dequeue_many(2)
    np.testing.assert_array_equal(ints, [[0, 0, 0], [0, 1, 2]])
    assert strs.tolist() == [[b"a", b""], [b"a", b"b"]]
    assert bools.shape == (2, 3, 2) and bools.sum() == 8


def test_q37_zero_length_elements() -> None:
    q = PaddingFIFOQueue(5, np.float32, shapes=[[None, 2]])
    q.enqueue(np.zeros((0, 2), np.float32))
    q.enqueue(np.zeros((0, 2), np.float32))
    assert q.dequeue_many(2).shape == (2, 0, 2)


def test_q37_padding_values_option() -> None:
    q = PaddingFIFOQueue(5, [np.int64, str], shapes=[[None], [None]], padding_values=[-1, "<pad>"])
    q.enqueue_many([np.array([[1, 2]]), [["x", "y"]]])
    q.enqueue([[7], ["z"]])
    ints, strs = q.dequeue_many(2)
    np.testing.assert_array_equal(ints, [[1, 2], [7, -1]])
    assert strs.tolist() == [[b"x", b"y"], [b"z", b"<pad>"]]


def test_q38_fully_defined_behaves_like_fifo() -> None:
    q = PaddingFIFOQueue(4, np.int32, shapes=[[2]])
    q.enqueue_many(np.arange(6, dtype=np.int32).reshape(3, 2))
    q.close()
    with pytest.raises(OutOfRangeError, match=r"\(requested 4, current size 3\)"):
        q.dequeue_many(4)
    np.testing.assert_array_equal(q.dequeue_up_to(4), np.arange(6).reshape(3, 2))


def test_q38_enqueue_many_rows_share_shape_and_up_to_pads() -> None:
    q = PaddingFIFOQueue(10, np.int32, shapes=[[None]])
    q.enqueue_many(np.ones((2, 3), np.int32))
    q.enqueue(np.ones(5, np.int32))
    q.close()
    out = q.dequeue_up_to(10)
    assert out.shape == (3, 5) and out.sum() == 11


@pytest.mark.parametrize("op", ["dequeue_many", "dequeue_up_to", "dequeue_available"])
def test_unpadded_batches_put_back_exactly_and_stack_pads_them(op: str) -> None:
    """padded=False hands out each element's own rows (what put_back needs to
    restore a padded batch exactly, e.g. for a remote caller that went away);
    stack() pads them as the batch dequeue would have (Q37)."""
    q = PaddingFIFOQueue(5, [np.int32, np.float32], shapes=[[None], [2]], names=["ids", "x"],
                         padding_values=[-1, 0.0])
    for ids in ([1, 2], [3], [4, 5, 6]):
        q.enqueue({"ids": np.array(ids, np.int32), "x": np.full(2, len(ids), np.float32)})
    rows = getattr(q, op)(2, padded=False)
    assert rows["ids"].dtype == object and [r.tolist() for r in rows["ids"]] == [[1, 2], [3]]
    np.testing.assert_array_equal(rows["x"], [[2, 2], [1, 1]])
    batch = q.stack(rows)
    np.testing.assert_array_equal(batch["ids"], [[1, 2], [3, -1]])
    np.testing.assert_array_equal(batch["x"], rows["x"])
    assert q.size() == 1  # stack touched nothing
    q.put_back(rows)
    assert [q.dequeue()["ids"].tolist() for _ in range(3)] == [[1, 2], [3], [4, 5, 6]]
    assert getattr(q, op)(0, padded=False)["ids"].shape == (0,)
    q.close()
    with pytest.raises(OutOfRangeError):
        getattr(q, op)(1, padded=False)


def test_unpadded_single_component_and_fixed_shapes() -> None:
    one = PaddingFIFOQueue(4, np.int32, shapes=[[None]])
    one.enqueue(np.array([7, 8], np.int32))
    one.enqueue(np.array([9], np.int32))
    rows = one.dequeue_many(2, padded=False)  # a bare object array: one component
    one.put_back(rows)
    assert [one.dequeue().tolist() for _ in range(2)] == [[7, 8], [9]]
    fixed = PaddingFIFOQueue(4, np.int32, shapes=[[2]])
    fixed.enqueue_many(np.arange(4, dtype=np.int32).reshape(2, 2))
    got = fixed.dequeue_many(2, padded=False)  # nothing to pad: the usual batch
    assert got.dtype == np.int32 and got.tolist() == [[0, 1], [2, 3]]
