"""A process stage as a ``tf.data.Dataset``: the signature read from its
first batch, one Keras epoch per stage epoch (no ``steps_per_epoch``)."""

from __future__ import annotations

import pytest

import feedq
from tests.process import _builds as builds
from tests.process._support import no_process_leaks  # noqa: F401

tf = pytest.importorskip("tensorflow")

pytestmark = pytest.mark.timeout(120)


# Keras 3 warns at the end of a first epoch of unknown size, then goes on
# with the next (checked below: both epochs ran, every batch once).
@pytest.mark.filterwarnings("ignore:Your input ran out of data:UserWarning")
def test_signature_from_the_first_batch_and_keras_fit_by_epoch() -> None:
    with feedq.process_stage(builds.keras_rows, 2, epochs=2) as stage:
        ds = feedq.as_tf_dataset(stage)
        x_spec, y_spec = ds.element_spec
        assert x_spec.shape.as_list() == [None, 4] and x_spec.dtype == tf.float32
        assert y_spec.shape.as_list() == [None] and y_spec.dtype == tf.float32
        model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(1)])
        model.compile(optimizer="sgd", loss="mse")
        history = model.fit(ds, epochs=2, verbose=0, shuffle=False)
        stats = stage.statistics()
        assert len(history.history["loss"]) == 2
        assert stage.epoch == 1
        assert stats.received == stats.produced == (8, 8)  # 2 epochs x 4 batches per worker
