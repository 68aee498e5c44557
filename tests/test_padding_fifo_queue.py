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
