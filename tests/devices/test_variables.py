"""feedq.Variable's dtype of Python data, with and without torch."""

from __future__ import annotations

import numpy as np
import pytest

import feedq
from feedq._core.arrays import variable_array
from feedq._devices import variables as variables_mod


@pytest.mark.parametrize("torch_present", [True, False], ids=["torch", "numpy"])
def test_variable_dtype_of_python_data(monkeypatch: pytest.MonkeyPatch, torch_present: bool) -> None:
    if not torch_present:
        monkeypatch.setattr(variables_mod, "_torch", lambda: None)
    dtypes = {repr(v): str(feedq.Variable(v).dtype).replace("torch.", "")
              for v in (3.0, [1.0, 2.0], 3, True, 1j, np.float64(2.0), np.int32(3))}
    assert dtypes == {"3.0": "float32", "[1.0, 2.0]": "float32", "3": "int64", "True": "bool",
                      "1j": "complex64", "np.float64(2.0)": "float64", "np.int32(3)": "int32"}


def test_variable_array_is_what_distributed_variables_hold() -> None:
    assert variable_array(0.0).dtype == np.float32
    assert variable_array(0.0, np.float64).dtype == np.float64  # an explicit dtype wins
    assert variable_array(np.zeros(2)).dtype == np.float64  # NumPy keeps its dtype
    assert variable_array([1, 2]).dtype == np.int64
