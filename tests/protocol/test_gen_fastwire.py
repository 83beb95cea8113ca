"""``tools/gen_fastwire.py``: the committed codec is what the generator makes of the metadata.

The generator is also run here on messages the schema does not have yet: a copy of
``StepRequest`` with a field added (the generated code must write and read it, and the
committed code, which predates it, must hand such a message to betterproto2 rather than
drop the field), and a message holding every kind of field the generator supports, checked
against betterproto2 on arbitrary values.
"""

# betterproto2 messages declare their fields as `betterproto2.field(...)` dataclass defaults.
# ruff: noqa: RUF009

from __future__ import annotations

import dataclasses
import importlib.util
import sys
import typing
from pathlib import Path
from types import ModuleType
from typing import Any

import betterproto2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trio_rlmesh.protocol import _generated, env_v1, spaces_v1
from trio_rlmesh.protocol._generated import fastwire as gen
from trio_rlmesh.protocol._wire import Fallback

from .messages import messages, same

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = _generated.__name__
SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "gen_fastwire", ROOT / "tools" / "gen_fastwire.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


generator = _load()


def _compile(source: str) -> dict[str, Any]:
    """Run generated source as if it were a module of the ``_generated`` package."""
    namespace: dict[str, Any] = {"__name__": f"{PACKAGE}._probe", "__package__": PACKAGE}
    exec(compile(source, "<generated>", "exec"), namespace)
    return namespace


def test_the_committed_codec_is_what_the_generator_makes() -> None:
    # `nox -s protos_check` checks the same against a fresh betterproto2 tree.
    source = generator.generate(generator.production_roots(_generated), package=PACKAGE)
    committed = (Path(gen.__file__)).read_text(encoding="utf-8")
    assert source == committed, "stale: run `nox -s protos`"


# ---------------------------------------------------------------------------- an added field


def _copy_with(cls: type[Any], name: str, annotation: Any, field: Any) -> type[Any]:
    """A copy of message ``cls`` (same fields, same metadata) with one field added."""
    hints = typing.get_type_hints(cls)
    spec: list[tuple[str, Any, Any]] = []
    for f in dataclasses.fields(cls):
        meta = f.metadata["betterproto"]
        copied = betterproto2.field(
            meta.number,
            meta.proto_type,
            default_factory=f.default_factory if meta.proto_type == "enum" else None,  # type: ignore[arg-type]
            map_meta=meta.map_meta,
            group=meta.group,
            optional=bool(meta.optional),
            repeated=bool(meta.repeated),
        )
        spec.append((f.name, hints[f.name], copied))
    spec.append((name, annotation, field))
    copy = dataclasses.make_dataclass(
        f"{cls.__name__}Plus", spec, bases=(betterproto2.Message,), eq=False, repr=False
    )
    copy.__module__ = __name__
    return copy


StepRequestPlus = _copy_with(
    env_v1.StepRequest, "priority", int, betterproto2.field(5, betterproto2.TYPE_SINT32)
)


def test_a_field_added_to_a_message_is_generated() -> None:
    assert "priority" not in env_v1.StepRequest._betterproto.meta_by_field_name
    source = generator.generate([generator.Root(StepRequestPlus)], package=PACKAGE)
    codec = _compile(source)
    assert codec["FIELDS"][StepRequestPlus] == (
        "action",
        "timeout_ms",
        "env_indices",
        "episode_ids",
        "priority",
    )

    message = StepRequestPlus(
        action=spaces_v1.SpaceValue(leaves=[b"\x01"]), episode_ids=["e"], priority=-3
    )
    data = bytes(message)
    assert codec["ENCODERS"][StepRequestPlus](message) == data
    decoded = codec["DECODERS"][StepRequestPlus](data, 0, len(data))
    assert same(decoded, StepRequestPlus.FromString(data))
    assert decoded.priority == -3


def test_the_committed_codec_never_drops_a_field_it_predates() -> None:
    message = StepRequestPlus(action=spaces_v1.SpaceValue(leaves=[b"\x01"]), priority=-3)
    data = bytes(message)
    with pytest.raises(Fallback):
        gen.enc_env_v1_StepRequest(message)  # not a StepRequest: betterproto2 encodes it
    with pytest.raises(Fallback):
        gen.dec_env_v1_StepRequest(data, 0, len(data))  # field 5 is unknown to it


def test_the_generator_refuses_what_it_cannot_reproduce() -> None:
    mapped = _copy_with(
        env_v1.StepRequest,
        "labels",
        dict[str, str],
        betterproto2.field(
            5,
            betterproto2.TYPE_MAP,
            map_meta=betterproto2.map_meta(betterproto2.TYPE_STRING, betterproto2.TYPE_STRING),
        ),
    )
    with pytest.raises(generator.GenerationError, match="labels"):
        generator.generate([generator.Root(mapped)], package=PACKAGE)
    with pytest.raises(generator.GenerationError, match="not a oneof arm"):
        generator.generate(
            [generator.Root(env_v1.JoinRequest, declined=("request_id",))], package=PACKAGE
        )


# ---------------------------------------------------------------------------- every kind


@dataclasses.dataclass(eq=False, repr=False)
class Every(betterproto2.Message):
    """One field of every kind the generator writes code for."""

    i32: int = betterproto2.field(1, betterproto2.TYPE_INT32)
    i64: int = betterproto2.field(2, betterproto2.TYPE_INT64)
    u32: int = betterproto2.field(3, betterproto2.TYPE_UINT32)
    u64: int = betterproto2.field(4, betterproto2.TYPE_UINT64)
    s32: int = betterproto2.field(5, betterproto2.TYPE_SINT32)
    s64: int = betterproto2.field(6, betterproto2.TYPE_SINT64)
    f32: int = betterproto2.field(7, betterproto2.TYPE_FIXED32)
    f64: int = betterproto2.field(8, betterproto2.TYPE_FIXED64)
    sf32: int = betterproto2.field(9, betterproto2.TYPE_SFIXED32)
    sf64: int = betterproto2.field(10, betterproto2.TYPE_SFIXED64)
    flag: bool = betterproto2.field(11, betterproto2.TYPE_BOOL)
    single: float = betterproto2.field(12, betterproto2.TYPE_FLOAT)
    double: float = betterproto2.field(13, betterproto2.TYPE_DOUBLE)
    text: str = betterproto2.field(14, betterproto2.TYPE_STRING)
    blob: bytes = betterproto2.field(15, betterproto2.TYPE_BYTES)
    # Field numbers from 16 on take two-byte keys.
    code: env_v1.EnvErrorCode = betterproto2.field(
        16, betterproto2.TYPE_ENUM, default_factory=lambda: env_v1.EnvErrorCode(0)
    )
    value: spaces_v1.SpaceValue | None = betterproto2.field(17, betterproto2.TYPE_MESSAGE)
    meta: spaces_v1.MetaMap | None = betterproto2.field(
        18, betterproto2.TYPE_MESSAGE, optional=True
    )
    maybe_s64: int | None = betterproto2.field(19, betterproto2.TYPE_SINT64, optional=True)
    maybe_float: float | None = betterproto2.field(20, betterproto2.TYPE_FLOAT, optional=True)
    maybe_code: env_v1.EnvErrorCode | None = betterproto2.field(
        21, betterproto2.TYPE_ENUM, optional=True
    )
    r_i32: list[int] = betterproto2.field(22, betterproto2.TYPE_INT32, repeated=True)
    r_s64: list[int] = betterproto2.field(23, betterproto2.TYPE_SINT64, repeated=True)
    r_bool: list[bool] = betterproto2.field(24, betterproto2.TYPE_BOOL, repeated=True)
    r_code: list[env_v1.EnvErrorCode] = betterproto2.field(
        25, betterproto2.TYPE_ENUM, repeated=True
    )
    r_f32: list[int] = betterproto2.field(26, betterproto2.TYPE_FIXED32, repeated=True)
    r_sf64: list[int] = betterproto2.field(27, betterproto2.TYPE_SFIXED64, repeated=True)
    r_float: list[float] = betterproto2.field(28, betterproto2.TYPE_FLOAT, repeated=True)
    r_text: list[str] = betterproto2.field(29, betterproto2.TYPE_STRING, repeated=True)
    r_blob: list[bytes] = betterproto2.field(30, betterproto2.TYPE_BYTES, repeated=True)
    r_value: list[spaces_v1.SpaceValue] = betterproto2.field(
        31, betterproto2.TYPE_MESSAGE, repeated=True
    )
    one_u64: int | None = betterproto2.field(32, betterproto2.TYPE_UINT64, group="pick")
    one_text: str | None = betterproto2.field(33, betterproto2.TYPE_STRING, group="pick")
    one_value: spaces_v1.SpaceValue | None = betterproto2.field(
        34, betterproto2.TYPE_MESSAGE, group="pick"
    )


EVERY = _compile(generator.generate([generator.Root(Every)], package=PACKAGE))


def test_every_field_kind_is_generated() -> None:
    assert EVERY["FIELDS"][Every] == tuple(Every._betterproto.meta_by_field_name)


@SETTINGS
@given(messages(Every))
def test_every_field_kind_matches_betterproto2(message: Every) -> None:
    data = bytes(message)
    assert EVERY["ENCODERS"][Every](message) == data
    decoded = EVERY["DECODERS"][Every](data, 0, len(data))
    assert same(decoded, Every.FromString(data))
    assert bytes(decoded) == data


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(messages(Every))
def test_every_field_kind_refuses_truncation(message: Every) -> None:
    data = bytes(message)
    boundaries = {0}
    at = 0
    for parsed in betterproto2.parse_fields(data):
        at += len(parsed.raw)
        boundaries.add(at)
    decode = EVERY["DECODERS"][Every]
    for cut in range(len(data)):
        if cut not in boundaries:
            with pytest.raises(ValueError):
                decode(data[:cut], 0, cut)


VARINT_FIELDS = [
    (name, field.number, bool(field.repeated))
    for name, field in Every._betterproto.meta_by_field_name.items()
    if field.proto_type
    in ("int32", "int64", "uint32", "uint64", "sint32", "sint64", "bool", "enum")
]


# Masking edges: 2**64 is zero as an int64 but true as a bool; 2**31 is negative as an int32.
WIDE = st.integers(0, 2**70 - 1) | st.sampled_from(
    [2**64, 2**65 + 1, 2**63, 2**32, 2**31, 2**70 - 1, 1, 0]
)


def _raw_varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


@SETTINGS
@given(st.lists(WIDE, min_size=1, max_size=4), st.booleans())
def test_wide_varints_are_read_like_betterproto2(values: list[int], packed: bool) -> None:
    # Varints up to ten bytes (70 bits), as another writer may send them: masked,
    # sign-converted, zigzag-decoded and truth-tested exactly as betterproto2 does.
    decode = EVERY["DECODERS"][Every]
    for name, number, repeated in VARINT_FIELDS:
        if repeated and packed:
            body = b"".join(map(_raw_varint, values))
            data = _raw_varint(number << 3 | 2) + _raw_varint(len(body)) + body
        else:
            data = b"".join(_raw_varint(number << 3) + _raw_varint(v) for v in values)
        decoded = decode(data, 0, len(data))
        assert same(decoded, Every.FromString(data)), name


@dataclasses.dataclass(eq=False, repr=False, kw_only=True)
class KeywordsOnly(betterproto2.Message):
    """A message whose ``__init__`` takes keywords only."""

    count: int = betterproto2.field(1, betterproto2.TYPE_UINT32)
    name: str = betterproto2.field(2, betterproto2.TYPE_STRING)


def test_decoded_messages_are_built_with_keywords_when_init_wants_them() -> None:
    source = generator.generate([generator.Root(KeywordsOnly)], package=PACKAGE)
    assert "(count=f_count, name=f_name)" in source
    assert "(f_count, f_name)" not in source
    data = bytes(KeywordsOnly(count=3, name="x"))
    decoded = _compile(source)["DECODERS"][KeywordsOnly](data, 0, len(data))
    assert same(decoded, KeywordsOnly.FromString(data))
    # The schema's own messages take positional arguments (twice as fast to build).
    assert "return env_v1_StepRequest(f_action, f_timeout_ms, f_env_indices, f_episode_ids)" in (
        Path(gen.__file__).read_text(encoding="utf-8")
    )
