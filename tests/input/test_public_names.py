"""feedq.input's public names."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import feedq

pytestmark = pytest.mark.timeout(30)


@pytest.fixture(autouse=True)
def _clean_collections() -> Iterator[None]:
    feedq.clear_queue_runners()
    yield
    feedq.clear_queue_runners()


def test_input_public_names_keep_their_paths() -> None:
    """feedq.input's public names are feedq's and report ``feedq.input``."""
    import feedq.input as finput

    for name in finput.__all__:
        obj = getattr(finput, name)
        assert getattr(feedq, name) is obj
        assert obj.__module__ == "feedq.input", name
