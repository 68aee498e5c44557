"""feedq._native resample_bilinear: the C core and its pure twin give the same
pixels as Pillow 13's antialiased bilinear resize, bit for bit (the same
coefficients, the same pass order, so the same rounding of the 8-bit
intermediate)."""

from __future__ import annotations

import numpy as np
import pytest

import feedq._native as nat
from feedq._native import _pure

# The backends themselves (the API layer's wrapper is tested through feedq.image).
BACKENDS = [_pure] + ([nat._core_module] if nat._core_module is not None else [])

pytestmark = pytest.mark.timeout(120)


def _case(rng: np.random.Generator, i: int) -> tuple[np.ndarray, int, tuple[float, ...], int, int, bool]:
    h, w = int(rng.integers(1, 120)), int(rng.integers(1, 120))
    img = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
    ps = 3 if i % 2 else 4
    if ps == 4:
        img = np.concatenate([img, np.full((h, w, 1), 7, np.uint8)], axis=2)
    oh, ow = int(rng.integers(1, 100)), int(rng.integers(1, 100))
    if i % 3 == 0:
        box = (0.0, 0.0, float(w), float(h))
    else:
        x0 = float(rng.uniform(0, w * 0.9))
        y0 = float(rng.uniform(0, h * 0.9))
        box = (x0, y0, float(rng.uniform(x0 + 0.05 * w + 1e-3, w)), float(rng.uniform(y0 + 0.05 * h + 1e-3, h)))
    return np.ascontiguousarray(img), ps, box, oh, ow, bool(i % 4 < 2)


def test_cores_agree_and_match_pillow() -> None:
    """The twin, the C core's two horizontal loops (through transposes, the
    default, and direct) and Pillow: the same bits."""
    pil = pytest.importorskip("PIL.Image")
    rng = np.random.default_rng(5)
    vertical_first = 0
    for i in range(120):
        img, ps, box, oh, ow, flip = _case(rng, i)
        h, w = img.shape[:2]
        if not (box[2] > box[0] and box[3] > box[1]):
            continue
        outs = []
        for core, transposed in [(c, t) for c in BACKENDS for t in (True, False)]:
            out = np.empty((oh, ow, 3), np.uint8)
            core.resample_bilinear(img, h, w, w * ps, ps, *box, out, oh, ow, flip, transposed)
            outs.append(out)
        for other in outs[1:]:
            np.testing.assert_array_equal(outs[0], other, err_msg=f"case {i}")
        ref = pil.fromarray(np.ascontiguousarray(img[..., :3])).resize(
            (ow, oh), pil.Resampling.BILINEAR, box=box)
        if flip:
            ref = ref.transpose(pil.Transpose.FLIP_LEFT_RIGHT)
        vertical_first += (h - oh) > 0 and (h - oh) > (w - ow) * 2
        np.testing.assert_array_equal(outs[0], np.asarray(ref), err_msg=f"case {i} vs Pillow")
    assert 10 < vertical_first < 110  # both pass orders were exercised


@pytest.mark.parametrize("core", BACKENDS, ids=lambda m: m.__name__.rsplit(".", 1)[-1])
def test_bad_arguments_are_refused(core: object) -> None:
    img = np.zeros((4, 4, 3), np.uint8)
    out = np.empty((2, 2, 3), np.uint8)
    fn = core.resample_bilinear  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="box"):
        fn(img, 4, 4, 12, 3, 0.0, 0.0, 5.0, 4.0, out, 2, 2, False)
    with pytest.raises(ValueError, match="does not fit"):
        fn(img, 5, 4, 12, 3, 0.0, 0.0, 4.0, 4.0, out, 2, 2, False)
    with pytest.raises(ValueError, match="too small"):
        fn(img, 4, 4, 12, 3, 0.0, 0.0, 4.0, 4.0, out, 3, 3, False)
