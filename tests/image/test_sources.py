"""The three containers of images -- TFRecord Examples, class folders, tar
shards -- deliver the same images with the same labels, once per epoch,
through one pipeline each."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

import feedq
from feedq.cli.datasets import make_image_dataset
from feedq.image import decode_resize_center_crop, image_folder
from feedq.readers import (
    FixedLenFeature,
    TarReader,
    TFRecordReader,
    WholeFileReader,
    parse_example,
)

pytestmark = pytest.mark.timeout(60)

N, CLASSES = 24, 3


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    root = tmp_path_factory.mktemp("images")
    return make_image_dataset(root, N, classes=CLASSES, shards=3, seed=5)


FEATURES = {"image/encoded": FixedLenFeature([], "string"),
            "image/class/label": FixedLenFeature([], "int64")}


def _run(paths: list[str], read_fn) -> list[tuple[str, int, str]]:
    """One epoch through a pipeline: (sha1 of the encoded image, label, sha1 of the eval crop)."""
    out: list[tuple[str, int, str]] = []
    with feedq.Pipeline() as pipe:
        files = feedq.string_input_producer(paths, num_epochs=1, shuffle=True, seed=3)
        read = read_fn(pipe, files)
        feedq.batch(read, 5, num_threads=2, enqueue_many=True, capacity=64,
                    dtypes=[object, np.int64, np.uint8], shapes=[[], [], [32, 32, 3]],
                    allow_smaller_final_batch=True)
        for encoded, labels, images in pipe:
            for e, lab, img in zip(encoded, labels, images):
                out.append((hashlib.sha1(e).hexdigest(), int(lab), hashlib.sha1(img.tobytes()).hexdigest()))
    return out


def _decoded(encoded: list[bytes] | np.ndarray, labels: np.ndarray) -> list[np.ndarray]:
    batch = decode_resize_center_crop(encoded, 32, 40)
    enc = np.empty(len(batch), dtype=object)
    enc[:] = [encoded[i] for i in batch.index.tolist()]
    return [enc, labels[batch.index], batch.images]


def test_three_containers_same_images_and_labels_once_per_epoch(dataset: dict[str, list[str]]) -> None:
    def tfrecord(pipe, files):
        reader = pipe.closing(TFRecordReader())

        def read():
            ex = parse_example(reader.read_block(files, 4), FEATURES)
            return _decoded(ex["image/encoded"], ex["image/class/label"].astype(np.int64))
        return read

    folder = image_folder(Path(dataset["folders"][0]).parents[1])
    assert folder.classes == tuple(f"class-{c:03d}" for c in range(CLASSES))

    def folders(pipe, files):
        reader = pipe.closing(WholeFileReader())

        def read():
            block = reader.read_block(files, 1)
            return _decoded(block.values(), folder.labels_of(block.keys()))
        return read

    def tar(pipe, files):
        reader = pipe.closing(TarReader(fields=("jpg", "cls")))

        def read():
            block = reader.read_block(files, 4)
            labels = np.array([int(c) for c in block["cls"].values()], dtype=np.int64)
            return _decoded(block["jpg"].values(), labels)
        return read

    a = _run(dataset["tfrecord"], tfrecord)
    b = _run(list(folder.filenames), folders)
    c = _run(dataset["tar"], tar)
    assert len(a) == len(b) == len(c) == N  # once each
    assert len(set(a)) == N
    assert sorted(a) == sorted(b) == sorted(c)
    # labels are those the dataset was written with (image i has label i % classes)
    assert sorted(lab for _, lab, _ in a) == sorted(i % CLASSES for i in range(N))


def test_a_bad_image_in_a_tfrecord_is_named_by_file_and_record(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # A user trial: a column parsed from a TFRecord block had lost the
    # records' keys, so a bad image was "image 1 of the batch" only.
    from feedq.cli.datasets import synthetic_jpegs
    from feedq.errors import InvalidArgumentError
    from feedq.image import decode_random_resized_crop, element_seeds
    from feedq.queues import FIFOQueue
    from feedq.readers import TFRecordWriter, serialize_example

    good = synthetic_jpegs(2, 1)
    path = tmp_path / "bad.tfrecord"
    with TFRecordWriter(str(path)) as w:
        for i, data in enumerate([good[0], b"not an image", good[1]]):
            w.write(serialize_example({"image/encoded": [data], "image/class/label": [i]}))
    q = FIFOQueue(1, str, shapes=[[]])
    q.enqueue(str(path))
    q.close()
    block = TFRecordReader().read_block(q, 10)
    ex = parse_example(block, FEATURES)
    where = f"{path}:{int(block.key_ids[1])}"  # TF's key: the file and the record's offset
    with pytest.raises(InvalidArgumentError, match=rf"image 1 of the batch \({where}\)"):
        decode_random_resized_crop(ex["image/encoded"], 32, keys=block.keys())
    b = decode_random_resized_crop(ex["image/encoded"], 32, keys=block.keys(), on_error="skip",
                                   seed=element_seeds(block, 7))
    assert b.index.tolist() == [0, 2] and where in caplog.text
    # The keys seed the crops as the block itself does.
    np.testing.assert_array_equal(element_seeds(ex["image/encoded"], 7, keys=block.keys()),
                                  element_seeds(block, 7))
    with pytest.raises(InvalidArgumentError, match="keys= has 2 keys for a batch of 3 images"):
        decode_random_resized_crop(ex["image/encoded"], 32, keys=block.keys()[:2])
