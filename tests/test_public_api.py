"""The public surface: __all__ lists exactly the public names (STYLE 13)."""

from __future__ import annotations

import importlib

import pytest

import feedq

MODULES = ["feedq", "feedq.errors", "feedq.queues", "feedq.coordinator", "feedq.runners", "feedq.pipeline",
           "feedq.input", "feedq.readers", "feedq.devices", "feedq.distributed"]


@pytest.mark.parametrize("name", MODULES)
def test_all_is_sorted_and_resolves(name: str) -> None:
    mod = importlib.import_module(name)
    exported = list(mod.__all__)
    assert exported == sorted(exported)
    assert len(set(exported)) == len(exported)
    missing = [n for n in exported if not hasattr(mod, n)]
    assert not missing, f"{name}.__all__ names missing attributes: {missing}"
    assert not [n for n in exported if n.startswith("_")]


def test_documented_names_exported() -> None:
    for n in ["FIFOQueue", "RandomShuffleQueue", "PaddingFIFOQueue", "PriorityQueue",
              "set_default_timeout", "get_default_timeout", "errors", "STRING"]:
        assert n in feedq.__all__


def test_public_classes_show_public_module() -> None:
    assert feedq.FIFOQueue.__module__.startswith("feedq.queues")
    assert feedq.errors.OutOfRangeError.__module__ == "feedq.errors"
