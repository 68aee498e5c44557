"""The errors feedq raises, named as TensorFlow 1.x names them.

TF1 code ports unchanged: ``except feedq.errors.OutOfRangeError`` works as
``except tf.errors.OutOfRangeError`` did. Where a Python built-in means the
same thing, the feedq class derives from it too, so plain Python code can
catch the built-in::

    FeedqError                         base of every pipeline error
    ├── OutOfRangeError                end of data: closed and drained queue,
    │                                  producer past its last epoch
    ├── CancelledError                 operation on a closed queue, or woken by
    │                                  close(cancel_pending_enqueues=True) /
    │                                  a coordinator stop
    ├── DeadlineExceededError          (also TimeoutError) a timeout expired
    ├── InvalidArgumentError           (also ValueError) an argument or
    │                                  element that does not fit
    ├── NotFoundError                  (also FileNotFoundError) missing file
    ├── PermissionDeniedError          (also PermissionError) a file or object
    │                                  the caller may not read or write
    ├── DataLossError                  corrupt or truncated record
    ├── UnavailableError               a remote task cannot be reached
    ├── AbortedError                   an operation aborted by a concurrent one
    ├── FailedPreconditionError        the object is not in a state to do this
    │   └── MissingExtraError          an optional package (an "extra": torch,
    │                                  CuPy, TensorFlow, Ray, zstandard, image) is not
    │                                  installed; also an UnimplementedError and
    │                                  an ImportError
    └── UnimplementedError             (also NotImplementedError)

Plain ``ValueError`` / ``TypeError`` are raised for misuse that TF1 reported at
graph-construction time (bad constructor arguments, lossy dtype conversion).
"""

from __future__ import annotations

__all__ = [
    "AbortedError",
    "CancelledError",
    "DataLossError",
    "DeadlineExceededError",
    "FailedPreconditionError",
    "FeedqError",
    "InvalidArgumentError",
    "MissingExtraError",
    "NotFoundError",
    "OutOfRangeError",
    "PermissionDeniedError",
    "UnavailableError",
    "UnimplementedError",
]


class FeedqError(Exception):
    """Base class of every error raised by a pipeline operation.

    The message is also available as ``.message`` (TF1's ``OpError.message``).
    """

    def __init__(self, message: str = "") -> None:
        super().__init__(message)
        self.message = message


class OutOfRangeError(FeedqError):
    """End of data.

    Raised by a dequeue on a closed queue that holds fewer elements than
    requested, by a reader whose filename queue is closed and empty, and by a
    producer that has run past ``num_epochs``. Not raised for a timeout
    (:class:`DeadlineExceededError`) or a cancelled call (:class:`CancelledError`).
    """


class CancelledError(FeedqError):
    """The operation was cancelled.

    Raised by an enqueue on a closed queue, by enqueues pending when a queue
    is closed with ``cancel_pending_enqueues=True``, and by every blocking call
    woken by a coordinator stop or a pipeline shutdown.
    """


class DeadlineExceededError(FeedqError, TimeoutError):
    """A blocking call did not complete within its ``timeout``.

    The call had no effect: nothing was inserted or removed (a partial
    ``dequeue_many`` puts what it had collected back, in order).
    """


class InvalidArgumentError(FeedqError, ValueError):
    """An element or argument does not fit what the object declares.

    For example a shape mismatch, a component count mismatch, a negative
    ``n``, or re-opening a shared queue with a different capacity.
    """


class NotFoundError(FeedqError, FileNotFoundError):
    """A file (or a named resource) does not exist."""


class PermissionDeniedError(FeedqError, PermissionError):
    """The caller may not read (or write) a file or object: a local file
    without read permission, or an object store answering "access denied".
    The message names the file or URL, never a credential."""


class DataLossError(FeedqError):
    """Unrecoverable data corruption: a bad checksum, a truncated record, a
    file shorter than its header. The message names the file and offset."""


class UnavailableError(FeedqError):
    """A remote task (a cluster server) or an object store cannot be reached
    or has died (after the retries its time budget allowed)."""


class AbortedError(FeedqError):
    """The operation was aborted, typically by a concurrent conflicting one."""


class FailedPreconditionError(FeedqError):
    """The object is not in a state that allows the operation."""


class UnimplementedError(FeedqError, NotImplementedError):
    """The operation is not supported by this object."""


# module name -> the pip extra that installs it (``pip install "feedq[extra]"``)
_EXTRAS = {
    "torch": "torch",
    "cupy": "cupy",
    "tensorflow": "tf",
    "ray": "ray",
    "zstandard": "zstd",
    "fsspec": "fsspec",
    "simplejpeg": "image",
    "PIL": "image",
}


class MissingExtraError(FailedPreconditionError, UnimplementedError, ImportError):
    """An optional dependency (an "extra") is not installed.

    Raised on first use of a feature that needs torch, CuPy, TensorFlow, Ray,
    ``zstandard`` (ZSTD compression) or simplejpeg / Pillow (images) when that package cannot be imported;
    the message names the ``pip install "feedq[extra]"`` command. Not raised at
    ``import feedq``, which needs NumPy only.

    It is three things at once, so each way of catching it that made sense
    before works:

    * a :class:`FailedPreconditionError`: the installation lacks what the
      operation needs;
    * an :class:`UnimplementedError` (and ``NotImplementedError``): the
      feature is not available in this installation, as TF reports a codec it
      was built without (ZSTD compression raised ``UnimplementedError``
      before this class existed);
    * an ``ImportError``: plain Python code catches it with
      ``except ImportError``; :attr:`name` is the module that is missing.
    """

    def __init__(self, message: str = "", *, name: str | None = None) -> None:
        """Args:
            message: the text, naming the pip command.
            name: the module that could not be imported (``ImportError.name``).
        """
        super().__init__(message)
        # The MRO reaches ImportError.__init__ only through RuntimeError's, which
        # ignores ImportError's fields: set them here.
        self.msg = message
        self.name = name

    @classmethod
    def for_module(cls, module: str, feature: str) -> MissingExtraError:
        """The error for ``feature`` needing ``module``, naming its pip extra.

        For scripts that import an extra themselves::

            try:
                import torch
            except ImportError:
                sys.exit(str(feedq.MissingExtraError.for_module("torch", "this script")))

        Args:
            module: ``"torch"``, ``"cupy"``, ``"tensorflow"``, ``"ray"``,
                ``"zstandard"`` (or another module: the extra is its name).
            feature: what needs it, for the message.
        """
        extra = _EXTRAS.get(module, module)
        return cls(f"{feature} needs {module}, which is not installed: "
                   f'pip install "feedq[{extra}]"', name=module)
