"""tf.train.Example message classes, built at run time from a descriptor.

Built in a private descriptor pool, so neither TensorFlow nor generated
``*_pb2`` files are needed, and nothing clashes with TensorFlow's own
registration of ``tensorflow.Example`` when both are loaded. The layout is
TensorFlow's ``feature.proto`` / ``example.proto`` (proto3).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = ["example_class", "serialize_example"]

_EXAMPLE: Any = None


def example_class() -> Any:
    """The ``tensorflow.Example`` message class (protobuf is imported on first use).

    Raises:
        ImportError: protobuf is not installed (one clear message).
    """
    global _EXAMPLE
    if _EXAMPLE is not None:
        return _EXAMPLE
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

    rep, opt = F.LABEL_REPEATED, F.LABEL_OPTIONAL
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
    feats = msg("Features")
    entry = feats.nested_type.add(name="FeatureEntry")
    entry.options.map_entry = True
    field(entry, "key", 1, F.TYPE_STRING, opt)
    field(entry, "value", 2, F.TYPE_MESSAGE, opt, ".tensorflow.Feature")
    field(feats, "feature", 1, F.TYPE_MESSAGE, rep, ".tensorflow.Features.FeatureEntry")
    field(msg("Example"), "features", 1, F.TYPE_MESSAGE, opt, ".tensorflow.Features")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    desc = pool.FindMessageTypeByName("tensorflow.Example")
    if hasattr(message_factory, "GetMessageClass"):  # protobuf >= 4.21
        _EXAMPLE = message_factory.GetMessageClass(desc)
    else:  # pragma: no cover - older protobuf
        _EXAMPLE = message_factory.MessageFactory(pool).GetPrototype(desc)
    return _EXAMPLE


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
        if isinstance(value, (bytes, str)):
            value = [value]
        arr = np.asarray(value)
        if arr.dtype.kind in "f":
            fmap[key].float_list.value.extend(arr.astype(np.float32).reshape(-1).tolist())
        elif arr.dtype.kind in "iub":
            fmap[key].int64_list.value.extend(arr.astype(np.int64).reshape(-1).tolist())
        elif arr.dtype.kind in "SUO":
            vals = [v.encode() if isinstance(v, str) else bytes(v) for v in arr.reshape(-1).tolist()]
            fmap[key].bytes_list.value.extend(vals)
        else:
            raise TypeError(f"feature {key!r}: unsupported value type {arr.dtype}")
    return bytes(ex.SerializeToString())
