"""Synthetic image datasets (feedq.cli._images) and ``feedq make-data --format images``."""

from __future__ import annotations

import tarfile
from pathlib import Path

import numpy as np
import pytest

from feedq.cli.datasets import make_image_dataset, synthetic_jpegs
from feedq.image import extract_jpeg_shape
from feedq.readers import tf_record_iterator
from tests.cli.test_cli import feedq

pytest.importorskip("simplejpeg")


def test_jpegs_look_like_imagenets() -> None:
    jpegs = synthetic_jpegs(200, seed=3)
    assert jpegs == synthetic_jpegs(200, seed=3)  # reproducible
    sizes = np.array([len(j) for j in jpegs])
    assert 70_000 < np.median(sizes) < 150_000
    shapes = extract_jpeg_shape(jpegs)
    long = shapes[:, :2].max(axis=1)
    assert 450 <= np.median(long) <= 550
    assert (shapes[:, 2] == 1).sum() >= 2  # some grayscale
    assert sum(b"\xff\xc2" in j[:2000] for j in jpegs) >= 1  # some progressive


def test_the_containers_hold_the_same_images(tmp_path: Path) -> None:
    out = make_image_dataset(tmp_path, 10, classes=3, shards=2, seed=1)
    jpegs = synthetic_jpegs(10, seed=1)
    assert [Path(p).read_bytes() for p in sorted(out["folders"], key=lambda p: Path(p).name)] == jpegs
    assert [Path(p).parent.name for p in sorted(out["folders"], key=lambda p: Path(p).name)] == [
        f"class-{i % 3:03d}" for i in range(10)]
    assert len(out["tfrecord"]) == 2 and sum(1 for p in out["tfrecord"] for _ in tf_record_iterator(p)) == 10
    with tarfile.open(out["tar"][0]) as t:
        names = t.getnames()
    assert names[:2] == ["class-000/img-000000.jpg", "class-000/img-000000.cls"]
    with pytest.raises(FileExistsError):
        make_image_dataset(tmp_path, 10)
    with pytest.raises(ValueError, match="unknown container"):
        make_image_dataset(tmp_path / "x", 1, containers=("zip",))


def test_make_data_images_command(tmp_path: Path) -> None:
    out = tmp_path / "img"
    proc = feedq("make-data", str(out), "--format", "images", "--records", "12", "--files", "3", check=True)
    assert "wrote 12 JPEGs" in proc.stdout
    assert sorted(p.name for p in (out / "tar").iterdir()) == [f"shard-{i:05d}.tar" for i in range(3)]
    assert sum(1 for _ in (out / "folders").rglob("*.jpg")) == 12
    again = feedq("make-data", str(out), "--format", "images", "--records", "12")
    assert again.returncode == 1 and "pass --force to overwrite" in again.stderr
