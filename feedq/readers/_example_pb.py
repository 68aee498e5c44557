"""tf.train.Example and SequenceExample message classes, built at run time
from a descriptor.

Built in a private descriptor pool, so neither TensorFlow nor generated
``*_pb2`` files are needed, and nothing clashes with TensorFlow's own
registration of ``tensorflow.Example`` when both are loaded. The layout is
TensorFlow's ``feature.proto`` / ``example.proto`` (proto3), and the same
bytes on the wire: files either side writes parse on the other.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = [
    "example_class",
    "sequence_example_class",
    "serialize_example",
    "serialize_sequence_example",
]

_CLASSES: dict[str, Any] = {}


def _build() -> dict[str, Any]:
    """Build ``Example`` and ``SequenceExample`` in one private pool."""
    try:
        from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
    except ImportError as exc:
        raise ImportError(
            "parsing tf.train.Example records needs protobuf: pip install protobuf"
        ) from exc
    F = descriptor_pb2.FieldDescriptorProto
    fdp = descriptor_pb2.FileDescriptorProto(
        name="feedq/example.proto", package="tensorflow", syntax="proto3"
    )

    def msg(name: str) -> Any:
        m = fdp.message_type.add()
        m.name = name
        return m

    def field(m: Any, name: str, num: int, typ: int, label: int, type_name: str = "") -> Any:
        f = m.field.add(name=name, number=num, type=typ, label=label)
        if type_name:
            f.type_name = type_name
        return f

    def string_map(m: Any, name: str, entry_name: str, value_type: str) -> None:
        entry = m.nested_type.add(name=entry_name)
        entry.options.map_entry = True
        field(entry, "key", 1, F.TYPE_STRING, opt)
        field(entry, "value", 2, F.TYPE_MESSAGE, opt, value_type)
        field(m, name, 1, F.TYPE_MESSAGE, rep, f".tensorflow.{m.name}.{entry_name}")

    rep, opt = F.LABEL_REPEATED, F.LABEL_OPTIONAL
    # feature.proto
    field(msg("BytesList"), "value", 1, F.TYPE_BYTES, rep)
    field(msg("FloatList"), "value", 1, F.TYPE_FLOAT, rep).options.packed = True
    field(msg("Int64List"), "value", 1, F.TYPE_INT64, rep).options.packed = True
    feat = msg("Feature")
    feat.oneof_decl.add(name="kind")
    for i, (n, t) in enumerate(
        [("bytes_list", "BytesList"), ("float_list", "FloatList"), ("int64_list", "Int64List")]
    ):
        f = field(feat, n, i + 1, F.TYPE_MESSAGE, opt, f".tensorflow.{t}")
        f.oneof_index = 0
    string_map(msg("Features"), "feature", "FeatureEntry", ".tensorflow.Feature")
    field(msg("FeatureList"), "feature", 1, F.TYPE_MESSAGE, rep, ".tensorflow.Feature")
    string_map(msg("FeatureLists"), "feature_list", "FeatureListEntry", ".tensorflow.FeatureList")
    # example.proto
    field(msg("Example"), "features", 1, F.TYPE_MESSAGE, opt, ".tensorflow.Features")
    seq = msg("SequenceExample")
    field(seq, "context", 1, F.TYPE_MESSAGE, opt, ".tensorflow.Features")
    field(seq, "feature_lists", 2, F.TYPE_MESSAGE, opt, ".tensorflow.FeatureLists")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    out = {}
    for name in ("Example", "SequenceExample"):
        desc = pool.FindMessageTypeByName(f"tensorflow.{name}")
        if hasattr(message_factory, "GetMessageClass"):  # protobuf >= 4.21
            out[name] = message_factory.GetMessageClass(desc)
        else:  # pragma: no cover - older protobuf
            out[name] = message_factory.MessageFactory(pool).GetPrototype(desc)
    return out


def example_class() -> Any:
    """The ``tensorflow.Example`` message class (protobuf is imported on first use).

    Raises:
        ImportError: protobuf is not installed (one clear message).
    """
    if not _CLASSES:
        _CLASSES.update(_build())
    return _CLASSES["Example"]


def sequence_example_class() -> Any:
    """The ``tensorflow.SequenceExample`` message class (``context`` features
    plus ``feature_lists``, each a list of Features, one per time step).

    Raises:
        ImportError: protobuf is not installed (one clear message).
    """
    if not _CLASSES:
        _CLASSES.update(_build())
    return _CLASSES["SequenceExample"]


def _fill(feature: Any, key: str, value: Any) -> None:
    """Set one ``Feature`` from a Python / NumPy value (see serialize_example)."""
    if isinstance(value, (bytes, str)):
        value = [value]
    arr = np.asarray(value)
    if arr.dtype.kind in "f":
        feature.float_list.value.extend(arr.astype(np.float32).reshape(-1).tolist())
    elif arr.dtype.kind in "iub":
        feature.int64_list.value.extend(arr.astype(np.int64).reshape(-1).tolist())
    elif arr.dtype.kind in "SUO":
        vals = [v.encode() if isinstance(v, str) else bytes(v) for v in arr.reshape(-1).tolist()]
        feature.bytes_list.value.extend(vals)
    else:
        raise TypeError(f"feature {key!r}: unsupported value type {arr.dtype}")


def serialize_example(features: Mapping[str, Any]) -> bytes:
    """Serialize a dict as a ``tf.train.Example`` (what TensorFlow writes).

    Values: floats / float arrays -> FloatList; ints / integer arrays ->
    Int64List; bytes, str or lists of them -> BytesList. Use it to write
    test data or files for TensorFlow without installing it.

    Args:
        features: feature name -> value(s).

    Returns:
        The serialized Example.

    Raises:
        TypeError: a value of another type.
    """
    ex = example_class()()
    fmap = ex.features.feature
    for key, value in features.items():
        _fill(fmap[key], key, value)
    return bytes(ex.SerializeToString())


def serialize_sequence_example(
    context: Mapping[str, Any], feature_lists: Mapping[str, Sequence[Any]]
) -> bytes:
    """Serialize a ``tf.train.SequenceExample`` (what TensorFlow writes).

    Args:
        context: feature name -> value(s), as for :func:`serialize_example`.
        feature_lists: feature list name -> one value(s) entry per time step;
            each step becomes one Feature (``None`` writes a Feature with no
            kind; an empty list an empty FloatList, an empty int64 array an
            empty Int64List).

    Returns:
        The serialized SequenceExample.

    Raises:
        TypeError: a value of another type.
    """
    ex = sequence_example_class()()
    cmap = ex.context.feature
    for key, value in context.items():
        _fill(cmap[key], key, value)
    lmap = ex.feature_lists.feature_list
    for key, steps in feature_lists.items():
        flist = lmap[key]
        for step in steps:
            feature = flist.feature.add()
            if step is not None:
                _fill(feature, key, step)
    return bytes(ex.SerializeToString())
