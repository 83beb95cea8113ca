"""Values crossing the env host: actions in, observations and infos out.

:class:`ValueGate` decodes actions and encodes observations under one conformance policy
(spec §6.8: structural deviations rejected, range deviations warned once per path, or
rejected under ``strict``). Infos become MetaMaps; render frames become PNG.
"""

from __future__ import annotations

import os
import struct
import zlib
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import attrs
import numpy as np

from ..._errors import CodecError, MetaConversionError
from ...protocol import env_v1, python_to_meta, spaces_v1
from ...protocol._internal import META_CONFORMANCE_WARNING, CarriedValue, carried_batch
from ...spaces import (
    Discrete,
    MultiDiscrete,
    Space,
    decode_batch,
    encode_batch,
    stack_lanes,
    unstack,
)
from ...spaces._internal import carry_batch, check_batch
from ._errors import Code, WireError

__all__ = [
    "ValidationPolicy",
    "ValueGate",
    "encode_png",
    "infos_to_meta",
    "merge_lane_infos",
    "validation_policy_from_env",
]

ValidationPolicy = Literal["warn", "strict", "off"]

_NONE: list[Any] = []
"""No warnings (shared: callers never mutate a warnings list)."""


@attrs.define(eq=False)
class ValueGate:
    """Action decoding and observation encoding under one conformance policy.

    Range warnings are reported once per ``(kind, path)`` for the gate's lifetime (one
    server), merged into the infos of the response that first saw them.
    """

    observation_space: Space
    action_space: Space
    policy: ValidationPolicy = "warn"
    _warned: set[tuple[str, str]] = attrs.field(factory=set)
    _decode_checks_actions: bool = attrs.field(init=False)
    """Whether decoding (or carrying) an action batch already rejects all that checking it
    would find."""

    def __attrs_post_init__(self) -> None:
        # Decoding a Discrete or MultiDiscrete leaf yields an integer array of the exact
        # shape and rejects values outside the domain (CodecError): conformance can find
        # nothing more in it, so the per-step check is skipped.
        self._decode_checks_actions = isinstance(self.action_space, Discrete | MultiDiscrete)

    def decode_actions(self, action: spaces_v1.SpaceValue | None, n: int) -> tuple[Any, list[Any]]:
        """The action batch of ``n`` lanes, and range warnings to report.

        Raises:
            WireError: INVALID_ACTION for undecodable or structurally wrong actions (or any
                deviation under the strict policy).
        """
        batch = carried_batch(action, self.action_space, n)
        if batch is None:
            leaves = action.leaves if action is not None else []
            if action is None or (not leaves and n):
                raise WireError(Code.INVALID_ACTION, f"expected {n} actions, got 0")
            try:
                batch = decode_batch(self.action_space, leaves, n)
            except CodecError as exc:
                raise WireError(Code.INVALID_ACTION, f"action does not decode: {exc}") from None
        # A carried batch went through the same domain check as a decoded one.
        if self._decode_checks_actions:
            return batch, _NONE
        return batch, self._check("action", batch, n, Code.INVALID_ACTION)

    def encode_observations(self, batch: Any, n: int) -> tuple[list[bytes], list[Any]]:
        """Leaves of a batched observation, and range warnings to report.

        Raises:
            WireError: INTERNAL when the env produced an observation outside its space.
        """
        warnings = self._check("observation", batch, n, Code.INTERNAL)
        try:
            return encode_batch(self.observation_space, batch, n), warnings
        except CodecError as exc:
            raise WireError(Code.INTERNAL, f"observation does not encode: {exc}") from None

    def carry_observations(self, batch: Any, n: int) -> tuple[CarriedValue, list[Any]]:
        """:meth:`encode_observations` for a receiver in this process: the same checks and
        errors, and the batch as the receiver would decode it, carried instead of encoded."""
        warnings = self._check("observation", batch, n, Code.INTERNAL)
        space = self.observation_space
        try:
            return CarriedValue(space, carry_batch(space, batch, n), n), warnings
        except CodecError as exc:
            raise WireError(Code.INTERNAL, f"observation does not encode: {exc}") from None

    def one_lane(self, observation: Any) -> Any:
        """One lane's observation as a batch of one, a view where it can be (it is encoded
        at once); INTERNAL on a bad shape."""
        try:
            return stack_lanes(self.observation_space, [observation], copy=False)
        except CodecError as exc:
            raise WireError(Code.INTERNAL, f"observation does not fit its space: {exc}") from None

    def stack_observations(self, lanes: Sequence[Any]) -> Any:
        """Single-lane observations stacked into one batch (INTERNAL on a bad shape)."""
        try:
            return stack_lanes(self.observation_space, lanes)
        except CodecError as exc:
            raise WireError(Code.INTERNAL, f"observation does not fit its space: {exc}") from None

    def split_actions(self, batch: Any, n: int) -> list[Any]:
        """An action batch split into per-lane values the env's ``step`` takes."""
        return [_writable(lane) for lane in unstack(self.action_space, batch, n)]

    def writable(self, batch: Any) -> Any:
        """A decoded batch with every array copied, so the env may write to it."""
        return _writable(batch)

    def _check(self, kind: str, batch: Any, n: int, code: env_v1.EnvErrorCode) -> list[Any]:
        deviations = check_batch(self._space(kind), batch, n)
        if not deviations:
            return _NONE
        if self.policy == "off":
            deviations = [d for d in deviations if d.kind != "range"]
        structural = [d for d in deviations if d.kind == "structural"]
        if structural:
            first = structural[0]
            raise WireError(code, f"{kind} does not conform at {first.path}: {first.detail}")
        if not deviations:
            return []
        if self.policy == "strict":
            first = deviations[0]
            raise WireError(code, f"{kind} out of range at {first.path}: {first.detail}")
        warnings = []
        for deviation in deviations:
            key = (kind, deviation.path)
            if key not in self._warned:
                self._warned.add(key)
                warnings.append({"kind": kind, "path": deviation.path, "detail": deviation.detail})
        return warnings

    def _space(self, kind: str) -> Space:
        return self.observation_space if kind == "observation" else self.action_space


def _writable(value: Any) -> Any:
    # Decoded arrays are read-only views of the request bytes; envs may write to actions.
    if isinstance(value, np.ndarray):
        return value.copy() if value.ndim else value[()]
    if isinstance(value, dict):
        return {key: _writable(item) for key, item in value.items()}
    if isinstance(value, tuple):
        return tuple(_writable(item) for item in value)
    return value


def infos_to_meta(info: Mapping[str, Any] | None, warnings: list[Any]) -> spaces_v1.MetaMap:
    """Env infos (plus conformance warnings) as a MetaMap; INTERNAL if not convertible."""
    if warnings:
        info = dict(info or {})
        info[META_CONFORMANCE_WARNING] = [*info.get(META_CONFORMANCE_WARNING, []), *warnings]
    if not info:
        return spaces_v1.MetaMap()
    try:
        return python_to_meta(info, path="$.info")
    except MetaConversionError as exc:
        raise WireError(Code.INTERNAL, f"env info cannot be sent: {exc}") from None


def merge_lane_infos(infos: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Several lanes' infos as one vector-style info: per key a list over lanes plus a
    ``_key`` mask of the lanes that set it (one lane: its info unchanged)."""
    if len(infos) == 1:
        return dict(infos[0])
    merged: dict[str, Any] = {}
    for key in dict.fromkeys(k for info in infos for k in info):
        merged[key] = [info.get(key) for info in infos]
        merged[f"_{key}"] = [key in info for info in infos]
    return merged


def validation_policy_from_env(default: ValidationPolicy = "warn") -> ValidationPolicy:
    """``RLMESH_VALIDATION_POLICY`` as the reference reads it (strict, off, else warn)."""
    value = os.environ.get("RLMESH_VALIDATION_POLICY", "").strip().lower()
    if value in ("strict", "off"):
        return value  # type: ignore[return-value]
    return default


def _chunk(kind: bytes, data: bytes) -> bytes:
    body = kind + data
    return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body) & 0xFFFFFFFF)


def encode_png(frame: Any) -> bytes | None:
    """PNG bytes for an image array of shape (H,W), (H,W,3|4) or (3|4,H,W); else None.

    Values are converted to uint8 (floats in [0, 1] are scaled to 0..255).
    """
    if frame is None:
        return None
    image = np.asarray(frame)
    if image.ndim == 3 and image.shape[-1] not in (3, 4) and image.shape[0] in (3, 4):
        image = np.moveaxis(image, 0, -1)
    if image.ndim == 2:
        color_type, channels = 0, 1
    elif image.ndim == 3 and image.shape[-1] in (3, 4):
        channels = image.shape[-1]
        color_type = 2 if channels == 3 else 6
    else:
        return None
    height, width = image.shape[:2]
    if height == 0 or width == 0:
        return None
    if image.dtype.kind == "f":
        scale = 255.0 if image.size and float(np.nanmax(image)) <= 1.0 else 1.0
        image = np.clip(np.nan_to_num(image) * scale, 0, 255)
    elif image.dtype.kind == "b":
        image = image.astype(np.uint8) * 255
    image = np.ascontiguousarray(image.astype(np.uint8)).reshape(height, width * channels)
    # Filter type 0 (none) in front of every row.
    raw = np.zeros((height, width * channels + 1), dtype=np.uint8)
    raw[:, 1:] = image
    header = struct.pack(">IIBBBBB", width, height, 8, color_type, 0, 0, 0)
    return b"".join(
        (
            b"\x89PNG\r\n\x1a\n",
            _chunk(b"IHDR", header),
            _chunk(b"IDAT", zlib.compress(raw.tobytes(), 6)),
            _chunk(b"IEND", b""),
        )
    )
