"""The error hierarchy (feedq/errors.py)."""

from __future__ import annotations

import pytest

from feedq import errors


@pytest.mark.parametrize(
    ("cls", "builtin"),
    [
        (errors.DeadlineExceededError, TimeoutError),
        (errors.InvalidArgumentError, ValueError),
        (errors.NotFoundError, FileNotFoundError),
        (errors.UnimplementedError, NotImplementedError),
    ],
)
def test_builtin_bases(cls: type[Exception], builtin: type[Exception]) -> None:
    assert issubclass(cls, builtin) and issubclass(cls, errors.FeedqError)
    with pytest.raises(builtin, match=r"^boom$"):
        raise cls("boom")


def test_every_tf_kind_exists_and_keeps_message() -> None:
    names = [
        "OutOfRangeError", "CancelledError", "DeadlineExceededError", "InvalidArgumentError",
        "NotFoundError", "DataLossError", "UnavailableError", "AbortedError",
        "FailedPreconditionError",
    ]
    for name in names:
        cls = getattr(errors, name)
        assert issubclass(cls, errors.FeedqError)
        err = cls("m")
        assert err.message == "m" and str(err) == "m"
    # feedq errors are not confused with each other.
    assert not issubclass(errors.OutOfRangeError, errors.CancelledError)
    assert not issubclass(errors.CancelledError, errors.OutOfRangeError)
