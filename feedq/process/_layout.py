"""How a batch is laid out in a shared-memory slot, and read back as views.

A batch is a structure (dicts, lists, tuples, named tuples such as
:class:`feedq.readers.SparseTensorValue` / ``RaggedTensorValue``) whose
leaves are arrays. :func:`flatten` splits it into a *tree* (small, pickled
into the control message) and the array *leaves*; :func:`plan` decides where
each leaf goes in the slot's payload; :func:`write` copies them in (one
``memcpy`` per numeric leaf); :func:`read` makes the leaves back from the
payload and :func:`unflatten` rebuilds the structure.

Leaf kinds:

* ``"a"``: a numeric (non-object) array: its bytes, 64-byte aligned; read
  back as a view (no copy) unless ``copy=True``.
* ``"s"``: an object array of ``bytes`` (or of ``str``: UTF-8, decoded back
  to ``str``): int64 offsets ``[n + 1]`` and the concatenated values; read
  back as an object array of new ``bytes`` objects (Python needs its own
  objects for them). Ragged data travels as ``RaggedTensorValue`` or
  ``SparseTensorValue``, whose parts are numeric arrays.

Other leaves (a Python int, a string, ``None``...) ride inside the tree,
pickled. An object array of anything but bytes/str cannot travel: an
``InvalidArgumentError`` names its place in the batch.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from feedq.errors import InvalidArgumentError

__all__ = ["ALIGN", "Plan", "flatten", "plan", "read", "unflatten", "write"]

ALIGN = 64

# Tree nodes: ("d", keys, children) a dict (or Mapping, rebuilt as dict);
# ("l", children) a list; ("t", None | namedtuple class, children) a tuple;
# ("x", i) leaf i; ("v", value) an inline value.
Tree = tuple[Any, ...]


def flatten(batch: Any) -> tuple[Tree, list[np.ndarray], list[str]]:
    """The tree of ``batch``, its array leaves in order, and where each leaf
    is in the batch (``['x']``, ``[1]``... for error messages)."""
    leaves: list[np.ndarray] = []
    paths: list[str] = []

    def walk(x: Any, path: str) -> Tree:
        if isinstance(x, np.ndarray):
            leaves.append(x)
            paths.append(path or "<batch>")
            return ("x", len(leaves) - 1)
        if isinstance(x, Mapping):
            keys = list(x.keys())
            return ("d", keys, [walk(x[k], f"{path}[{k!r}]") for k in keys])
        if isinstance(x, tuple):
            cls = type(x) if hasattr(x, "_fields") else None
            return ("t", cls, [walk(v, f"{path}[{i}]") for i, v in enumerate(x)])
        if isinstance(x, list):
            return ("l", [walk(v, f"{path}[{i}]") for i, v in enumerate(x)])
        if x is None or isinstance(x, (bool, int, float, complex, str, bytes, np.generic)):
            return ("v", x)
        if hasattr(x, "__array__"):  # torch CPU tensors, array-likes
            leaves.append(np.asarray(x))
            paths.append(path or "<batch>")
            return ("x", len(leaves) - 1)
        raise InvalidArgumentError(
            f"batch component {path or '<batch>'} is a {type(x).__name__}: a process stage "
            "carries arrays (numeric, bytes or str), dicts, lists and tuples of them"
        )

    tree = walk(batch, "")
    return tree, leaves, paths


def unflatten(tree: Tree, leaves: list[Any]) -> Any:
    """The structure ``tree`` describes, with ``leaves`` in its leaf places."""
    kind = tree[0]
    if kind == "x":
        return leaves[tree[1]]
    if kind == "v":
        return tree[1]
    if kind == "d":
        return {k: unflatten(c, leaves) for k, c in zip(tree[1], tree[2])}
    if kind == "l":
        return [unflatten(c, leaves) for c in tree[1]]
    cls = tree[1]
    items = [unflatten(c, leaves) for c in tree[2]]
    return tuple(items) if cls is None else cls(*items)


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


class Plan:
    """Where each leaf of one batch goes: ``descs`` (sent to the consumer)
    and ``nbytes`` (the payload size), plus the encoded strings to write."""

    __slots__ = ("descs", "nbytes", "_sources")

    def __init__(self, descs: list[tuple[Any, ...]], nbytes: int, sources: list[Any]) -> None:
        self.descs = descs
        self.nbytes = nbytes
        self._sources = sources


def _dtype_token(dt: np.dtype[Any]) -> Any:
    return dt if dt.fields is not None or dt.subdtype is not None else dt.str


def plan(leaves: list[np.ndarray], where: list[str] | None = None) -> Plan:
    """Lay ``leaves`` out one after the other, each 64-byte aligned."""
    descs: list[tuple[Any, ...]] = []
    sources: list[Any] = []
    off = 0
    for i, arr in enumerate(leaves):
        if arr.dtype.kind != "O":
            descs.append(("a", _dtype_token(arr.dtype), arr.shape, off))
            sources.append(arr)
            off = _align(off + arr.nbytes)
            continue
        flat = arr.ravel()
        items = flat.tolist()
        is_str = bool(items) and all(isinstance(v, str) for v in items)
        try:
            encoded = [_as_bytes(v) for v in items]
        except TypeError:
            name = where[i] if where else f"leaf {i}"
            kinds = sorted({type(v).__name__ for v in items})
            raise InvalidArgumentError(
                f"batch component {name}: an object array of {', '.join(kinds)} cannot travel "
                "through shared memory; use numeric arrays, bytes/str arrays, or "
                "feedq.readers.RaggedTensorValue / SparseTensorValue for ragged data"
            ) from None
        offsets = np.zeros(len(encoded) + 1, np.int64)
        if encoded:
            np.cumsum([len(b) for b in encoded], out=offsets[1:])
        values = b"".join(encoded)
        off_offsets = off
        off = _align(off + offsets.nbytes)
        off_values = off
        off = _align(off + len(values))
        descs.append(("s", is_str, arr.shape, off_offsets, len(encoded), off_values, len(values)))
        sources.append((offsets, values))
    return Plan(descs, off, sources)


def _as_bytes(v: Any) -> bytes:
    if isinstance(v, (bytes, bytearray, memoryview, np.bytes_)):
        return bytes(v)
    if isinstance(v, str):
        return v.encode()
    raise TypeError(type(v).__name__)


def write(p: Plan, payload: np.ndarray) -> None:
    """Copy the leaves into ``payload`` (a uint8 array of at least
    ``p.nbytes``) at the places ``p`` gave them."""
    for desc, src in zip(p.descs, p._sources):
        if desc[0] == "a":
            arr: np.ndarray = src
            n = arr.nbytes
            if n == 0:
                continue
            dst = payload[desc[3]:desc[3] + n].view(arr.dtype).reshape(arr.shape)
            np.copyto(dst, arr, casting="no")
        else:
            offsets, values = src
            o, v = desc[3], desc[5]
            payload[o:o + offsets.nbytes] = offsets.view(np.uint8)
            if values:
                payload[v:v + len(values)] = np.frombuffer(values, np.uint8)


def read(payload: np.ndarray, descs: list[tuple[Any, ...]], copy: bool = False) -> list[Any]:
    """The leaves of one batch from ``payload``: views of it (numeric
    leaves, unless ``copy``) and new object arrays (strings)."""
    out: list[Any] = []
    for desc in descs:
        if desc[0] == "a":
            dt = np.dtype(desc[1])
            shape = desc[2]
            n = dt.itemsize * int(np.prod(shape, dtype=np.int64))
            view = payload[desc[3]:desc[3] + n].view(dt).reshape(shape)
            out.append(view.copy() if copy else view)
            continue
        _, is_str, shape, o, count, v, nvalues = desc
        offsets = payload[o:o + 8 * (count + 1)].view(np.int64).tolist()
        blob = payload[v:v + nvalues].tobytes()
        items: list[Any] = [blob[offsets[j]:offsets[j + 1]] for j in range(count)]
        if is_str:
            items = [b.decode() for b in items]
        arr = np.empty(count, dtype=object)
        arr[:] = items
        out.append(arr.reshape(shape))
    return out
