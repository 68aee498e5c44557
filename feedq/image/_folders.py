"""A tree of class folders (``root/<class>/<image>``) as filenames and labels.

Classes are the sub-folder names, sorted, numbered from 0 (torchvision's
``ImageFolder`` numbering); files are sorted within each class, so the list
is the same on every machine. Feed ``filenames`` to
``string_input_producer`` and read them with ``WholeFileReader``; a record's
key is its filename, which :meth:`ImageFolder.labels_of` maps back to its label.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from feedq.errors import InvalidArgumentError, NotFoundError

__all__ = ["IMAGE_EXTENSIONS", "ImageFolder", "image_folder"]

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".gif")


@dataclass(frozen=True)
class ImageFolder:
    """The images of a class-folder tree.

    Attributes:
        root: the tree's root.
        classes: the class names (sub-folders), sorted; label ``i`` is ``classes[i]``.
        filenames: every image's path, class by class, sorted.
        labels: int64 ``[n]``, the label of each filename.
    """

    root: str
    classes: tuple[str, ...]
    filenames: tuple[str, ...]
    labels: np.ndarray
    _by_name: dict[bytes, int] = field(default_factory=dict, repr=False, compare=False)

    def labels_of(self, keys: Iterable[Any]) -> np.ndarray:
        """The labels of records keyed by their filenames (``WholeFileReader`` keys).

        Raises:
            InvalidArgumentError: a key that is none of the tree's files.
        """
        if not self._by_name:
            self._by_name.update(
                (os.fsencode(f), int(lab)) for f, lab in zip(self.filenames, self.labels)
            )
        out = []
        for k in keys:
            kb = os.fsencode(k) if isinstance(k, str) else bytes(k)
            try:
                out.append(self._by_name[kb])
            except KeyError:
                raise InvalidArgumentError(
                    f"{kb.decode('utf-8', 'backslashreplace')} is not an image of {self.root}"
                ) from None
        return np.asarray(out, dtype=np.int64)


def image_folder(root: str | os.PathLike[str], extensions: Iterable[str] = IMAGE_EXTENSIONS) -> ImageFolder:
    """Scan ``root/<class>/<image>`` (one level of class folders).

    Args:
        root: the tree's root.
        extensions: the file suffixes that are images (case-insensitive).

    Raises:
        NotFoundError: ``root`` is not a directory, or holds no class folder.
    """
    top = os.fspath(root)
    if not os.path.isdir(top):
        raise NotFoundError(f"{top}: not a directory")
    exts = tuple(e.lower() for e in extensions)
    classes = sorted(e.name for e in os.scandir(top) if e.is_dir())
    if not classes:
        raise NotFoundError(f"{top}: no class folders")
    files: list[str] = []
    labels: list[int] = []
    for label, cls in enumerate(classes):
        folder = os.path.join(top, cls)
        names = sorted(
            e.name for e in os.scandir(folder) if e.is_file() and e.name.lower().endswith(exts)
        )
        files.extend(os.path.join(folder, n) for n in names)
        labels.extend([label] * len(names))
    return ImageFolder(top, tuple(classes), tuple(files), np.asarray(labels, dtype=np.int64))
