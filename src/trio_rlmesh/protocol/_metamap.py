"""``MetaMap`` entries whose value is null, on the wire as RLMesh 0.1.0 writes them.

A null is a ``MetaValue`` with no arm set. RLMesh encodes protobuf maps with prost, which
leaves out an entry's key or value when it equals the default, so a null entry arrives as
the key alone (``"range": null`` inside ``rlmesh.adapters.v1.env_tags`` in a model
``ResolveAdapterRequest``, for one). Protobuf's map rules read a missing message value as
the empty message, but betterproto2 0.10 stores ``None`` there and then cannot encode the
map again (``TypeError: cannot convert 'NoneType' object to bytes``), so forwarding such
a contract failed.

:func:`install` fixes both directions on the generated ``MetaMap`` class (the generated
code itself is never edited):

* decoding: an entry without a value holds ``MetaValue()``, never ``None``;
* encoding: an entry is written as prost writes it, the empty key and the null value left
  out, so a decoded message re-encodes to the very bytes RLMesh sent. ``None`` as an
  entry's value is accepted and written as a null.

The fast codec (``_fastwire``, generated) follows the same rules; ``tests/protocol`` pins
both against capture H.
"""

from __future__ import annotations

from typing import IO, Any

import betterproto2

from ._generated.rlmesh.spaces import v1 as spaces_v1
from ._wire import encode_varint

__all__ = ["encode_meta_map", "install"]

_installed = False


def encode_meta_map(meta: spaces_v1.MetaMap) -> bytes:
    """The wire form of ``meta``: entries in dict order, empty keys and null values left out."""
    out = bytearray()
    for key, value in meta.entries.items():
        entry = bytearray()
        if key:
            raw = key.encode("utf-8")
            entry += b"\x0a" + encode_varint(len(raw)) + raw
        if value is not None:
            if not isinstance(value, betterproto2.Message):
                raise TypeError(
                    f"MetaMap entry {key!r} holds a {type(value).__name__}, not a MetaValue"
                )
            encoded = bytes(value)
            if encoded:
                entry += b"\x12" + encode_varint(len(encoded)) + encoded
        out += b"\x0a" + encode_varint(len(entry)) + entry
    out += meta._unknown_fields
    return bytes(out)


def install() -> None:
    """Patch the generated ``MetaMap`` class (idempotent; runs when the package is imported)."""
    global _installed
    if _installed:
        return
    meta_map: Any = spaces_v1.MetaMap
    base_load = meta_map.load

    def load(
        self: spaces_v1.MetaMap, stream: IO[bytes], size: int | None = None
    ) -> spaces_v1.MetaMap:
        base_load(self, stream, size)
        entries: dict[str, spaces_v1.MetaValue | None] = self.entries  # type: ignore[assignment]
        for key in [k for k, v in entries.items() if v is None]:
            entries[key] = spaces_v1.MetaValue()
        return self

    meta_map.load = load
    meta_map.__bytes__ = encode_meta_map
    _installed = True
