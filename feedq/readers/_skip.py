"""_SkipFile: the per-file error a reader raises once or skips (R8, R9, X6).

A reader's ``_open`` and ``_next_block`` raise it (or leave it pending after
the good records before it); :meth:`ReaderBase._handle` is the one place it
is raised to the caller or logged and skipped.
"""

from __future__ import annotations

from feedq.errors import DataLossError, FeedqError, NotFoundError


class _SkipFile(Exception):
    """Internal: a per-file error to raise or skip; ``resume`` = offset to go on from."""

    def __init__(self, error: FeedqError, offset: int | None, resume: int | None = None) -> None:
        super().__init__(error.message)
        self.error = error
        self.offset = offset
        self.resume = resume


def _not_found(err: NotFoundError) -> _SkipFile:
    return _SkipFile(err, None)


def _open_failed(err: FeedqError) -> _SkipFile:
    """An open refused or unreachable (PermissionDenied, Unavailable, InvalidArgument)."""
    return _SkipFile(err, None)


def _data_loss(err: DataLossError, offset: int | None, resume: int | None = None) -> _SkipFile:
    return _SkipFile(err, offset, resume)
