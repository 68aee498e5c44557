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


def test_missing_extra_error_is_in_errors_and_every_old_kind() -> None:
    """MissingExtraError lives in feedq.errors (readers raise it too, for
    zstandard) and stays importable where it was; it is caught as a
    FailedPreconditionError and an ImportError (as when it lived in
    feedq.devices) and as an UnimplementedError / NotImplementedError (what a
    missing zstandard raised before)."""
    import pickle

    import feedq
    import feedq.devices

    cls = errors.MissingExtraError
    assert "MissingExtraError" in errors.__all__
    assert cls.__module__ == "feedq.errors"
    assert feedq.MissingExtraError is cls and feedq.devices.MissingExtraError is cls
    for base in (errors.FeedqError, errors.FailedPreconditionError, errors.UnimplementedError,
                 NotImplementedError, ImportError):
        assert issubclass(cls, base), base
    error = cls.for_module("zstandard", "ZSTD compression")
    assert str(error) == error.message == error.msg == (
        'ZSTD compression needs zstandard, which is not installed: pip install "feedq[zstd]"')
    assert error.name == "zstandard"
    assert str(cls.for_module("ray", "x")).endswith('"feedq[ray]"')
    assert str(cls.for_module("other", "x")).endswith('"feedq[other]"')
    plain = cls("m")
    assert (plain.message, plain.msg, plain.name, plain.args) == ("m", "m", None, ("m",))
    # Errors cross processes (Ray): the copy keeps its type, text and module name.
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is cls and copy.args == error.args and copy.name == "zstandard"
    assert copy.message == error.message


def test_the_tree_in_the_docstring_names_every_error() -> None:
    doc = errors.__doc__ or ""
    for name in errors.__all__:
        assert name in doc, name
    assert "│   └── MissingExtraError" in doc  # drawn under FailedPreconditionError
