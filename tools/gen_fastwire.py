"""Generate the fast per-step protobuf codec from betterproto2's field metadata.

Usage (``nox -s protos`` and ``nox -s protos_check`` run it after betterproto2)::

    python tools/gen_fastwire.py GENERATED_DIR OUTPUT

``GENERATED_DIR`` is a betterproto2 output tree (``src/trio_rlmesh/protocol/_generated`` or
a fresh one); ``OUTPUT`` is where the codec goes (``GENERATED_DIR/fastwire.py``).

The source of truth is the metadata betterproto2 itself serializes and parses with
(``Message._betterproto``), not the ``.proto`` descriptors: the codec must reproduce
betterproto2 byte for byte, and that metadata *is* betterproto2's view of each message
(dataclass field order, which is the order it writes fields in; explicit presence; packed
types; the class of each message field). ``_checked`` and the property tests read the same
metadata, so nothing translates between two schemas.

From each root message in :func:`production_roots`, every field is followed to the messages
it reaches, except the root's *declined* oneof arms, which stay with betterproto2 (a root
carrying one is encoded and decoded by betterproto2 whole). Every reached message gets one
encoder and one decoder handling all of its fields; a field kind the generator cannot
reproduce exactly stops generation with an error, so nothing is ever dropped silently. The
output also lists, per message, the fields handled (``FIELDS``) and declined (``DECLINED``),
which ``tests/protocol`` compares with the metadata.

Only the standard library and betterproto2 are needed; the tags written into the output
are encoded by ``src/trio_rlmesh/protocol/_wire.py``, loaded from its file.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import inspect
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

__all__ = ["GenerationError", "Root", "generate", "load_generated", "main", "production_roots"]

ROOT = Path(__file__).resolve().parents[1]
WIRE_PY = ROOT / "src" / "trio_rlmesh" / "protocol" / "_wire.py"


def _load_wire() -> ModuleType:
    spec = importlib.util.spec_from_file_location("_gen_fastwire_wire", WIRE_PY)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_wire = _load_wire()


class GenerationError(Exception):
    """The metadata holds something the generator cannot reproduce byte for byte."""


@dataclasses.dataclass(frozen=True)
class Root:
    """A message the fast codec starts from."""

    message: type[Any]
    """A betterproto2 message class."""
    declined: tuple[str, ...] = ()
    """Oneof arms left to betterproto2 (rare messages): the fast path hands those over."""


def production_roots(package: ModuleType) -> list[Root]:
    """The per-step Join messages of ``package`` (a betterproto2 output tree).

    The declined arms are sent once per session or never on the hot path; betterproto2
    (and ``_checked`` behind it) handles them.
    """
    env = importlib.import_module(f"{package.__name__}.rlmesh.env.v1")
    model = importlib.import_module(f"{package.__name__}.rlmesh.model.v1")
    return [
        Root(env.JoinRequest, declined=("render", "close", "configure")),
        Root(env.JoinResponse, declined=("render", "close")),
        Root(
            model.JoinRequest,
            declined=("resolve_adapter", "release_adapter", "close", "grouped_predict"),
        ),
        Root(model.JoinResponse, declined=("resolve_adapter", "close", "grouped_predict")),
    ]


# ---------------------------------------------------------------------------- proto types

_VARINT = {"int32", "int64", "uint32", "uint64", "sint32", "sint64", "bool", "enum"}
# proto type -> struct code
_FIXED = {
    "double": "d",
    "fixed64": "Q",
    "sfixed64": "q",
    "float": "f",
    "fixed32": "I",
    "sfixed32": "i",
}
_PY_TYPES = {
    "int32": "int",
    "int64": "int",
    "uint32": "int",
    "uint64": "int",
    "sint32": "int",
    "sint64": "int",
    "fixed32": "int",
    "fixed64": "int",
    "sfixed32": "int",
    "sfixed64": "int",
    "bool": "bool",
    "double": "float",
    "float": "float",
    "string": "str",
    "bytes": "bytes",
}
_ZEROS = {"int": "0", "bool": "False", "float": "0.0", "str": '""', "bytes": 'b""'}
# Maps whose encoding ``_metamap`` patches to prost's (empty key, null value left out).
_PROST_MAPS = {("MetaMap", "entries")}


def _scalar_wire_type(proto_type: str) -> int:
    if proto_type in _VARINT:
        return int(_wire.WIRE_VARINT)
    if proto_type in _FIXED:
        return int(_wire.WIRE_FIXED64 if _FIXED[proto_type] in "dQq" else _wire.WIRE_FIXED32)
    return int(_wire.WIRE_LEN)


def _key(number: int, wire_type: int) -> int:
    return number << 3 | wire_type


def _tag(number: int, wire_type: int) -> str:
    raw: bytes = _wire.encode_tag(number, wire_type)
    return 'b"' + "".join(f"\\x{b:02x}" for b in raw) + '"'


# ---------------------------------------------------------------------------- the model


@dataclasses.dataclass(frozen=True)
class _Field:
    name: str
    number: int
    proto_type: str
    repeated: bool
    presence: bool  # explicit presence: optional, oneof arm or message (None means unset)
    group: str | None
    cls: type[Any] | None  # message or enum class
    map_value: type[Any] | None


def _fields(cls: type[Any]) -> list[_Field]:
    meta = cls._betterproto
    fields = []
    for name, fm in meta.meta_by_field_name.items():
        if fm.unwrap is not None:
            raise GenerationError(f"{cls.__name__}.{name}: wrapped types are not supported")
        proto_type = fm.proto_type
        map_value = None
        if proto_type == "map":
            key_meta, value_meta = fm.map_meta
            if (cls.__name__, name) not in _PROST_MAPS or (
                key_meta.proto_type,
                value_meta.proto_type,
            ) != ("string", "message"):
                raise GenerationError(
                    f"{cls.__name__}.{name}: only maps whose encoding _metamap patches "
                    "(string keys, message values) are supported"
                )
            map_value = meta.cls_by_field[f"{name}.value"]
        elif proto_type not in _PY_TYPES and proto_type not in ("message", "enum"):
            raise GenerationError(f"{cls.__name__}.{name}: unsupported type {proto_type}")
        fields.append(
            _Field(
                name=name,
                number=fm.number,
                proto_type=proto_type,
                repeated=bool(fm.repeated),
                presence=bool(fm.optional or fm.group or proto_type == "message"),
                group=fm.group,
                cls=meta.cls_by_field.get(name) if proto_type in ("message", "enum") else None,
                map_value=map_value,
            )
        )
    return fields


class _Names:
    """Python names for the modules and classes the output refers to."""

    def __init__(self, package: str) -> None:
        self.package = package
        self.modules: dict[str, str] = {}  # module name -> alias
        self.classes: dict[type[Any], str] = {}  # class -> alias

    def module(self, name: str) -> str:
        if name not in self.modules:
            alias = "_".join(name.split(".")[-2:])
            if alias in self.modules.values():
                raise GenerationError(f"two modules would be called {alias}")
            self.modules[name] = alias
        return self.modules[name]

    def cls(self, cls: type[Any]) -> str:
        if cls not in self.classes:
            alias = f"{self.module(cls.__module__)}_{cls.__qualname__.replace('.', '_')}"
            if alias in self.classes.values():
                raise GenerationError(f"two classes would be called {alias}")
            self.classes[cls] = alias
        return self.classes[cls]

    def annotation(self, cls: type[Any]) -> str:
        return f"{self.module(cls.__module__)}.{cls.__qualname__}"

    def import_lines(self) -> list[str]:
        lines = []
        for name, alias in sorted(self.modules.items(), key=lambda item: item[1]):
            if name.startswith(self.package + "."):
                parent, _, last = name[len(self.package) :].rpartition(".")
                lines.append(f"from .{parent.lstrip('.')} import {last} as {alias}")
            else:
                parent, _, last = name.rpartition(".")
                lines.append(f"from {parent} import {last} as {alias}")
        return lines


def _reachable(roots: Sequence[Root]) -> tuple[list[type[Any]], dict[type[Any], tuple[str, ...]]]:
    """Every message class the roots reach (depth first, in field order), and declined arms."""
    declined: dict[type[Any], tuple[str, ...]] = {}
    for root in roots:
        fields = {f.name: f for f in _fields(root.message)}
        for arm in root.declined:
            if arm not in fields or fields[arm].group is None:
                raise GenerationError(f"{root.message.__name__}.{arm} is not a oneof arm")
        declined[root.message] = root.declined
    order: list[type[Any]] = []

    def visit(cls: type[Any]) -> None:
        if cls in order:
            return
        order.append(cls)
        for field in _fields(cls):
            if field.name in declined.get(cls, ()):
                continue
            if field.proto_type == "message":
                assert field.cls is not None
                visit(field.cls)
            elif field.map_value is not None:
                visit(field.map_value)

    for root in roots:
        visit(root.message)
    return order, declined


# ---------------------------------------------------------------------------- emitting


class _Out:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.helpers: set[str] = set()
        self.structs: set[str] = set()

    def __call__(self, indent: int, text: str) -> None:
        self.lines.append("    " * indent + text if text else "")

    def use(self, *names: str) -> str:
        self.helpers.update(names)
        return names[0]

    def struct(self, code: str) -> str:
        self.structs.add(code)
        return f"_S_{code}"


def _varint_conversion(field: _Field, raw: str, names: _Names, out: _Out) -> str:
    """The Python value betterproto2 makes of the raw varint ``raw`` for ``field``."""
    t = field.proto_type
    if t == "uint64":
        return f"{raw} & {out.use('_U64')}"
    if t == "uint32":
        return f"{raw} & {out.use('_U32')}"
    if t in ("int64", "enum"):
        value = f"(({raw} & {out.use('_U64')}) ^ {out.use('_SIGN64')}) - _SIGN64"
        if t == "enum":
            assert field.cls is not None
            return f"{names.cls(field.cls)}({value})"
        return value
    if t == "int32":
        return f"(({raw} & {out.use('_U32')}) ^ {out.use('_SIGN32')}) - _SIGN32"
    if t == "sint64":
        return f"{out.use('_unzigzag')}({raw} & {out.use('_U64')})"
    if t == "sint32":
        return f"{out.use('_unzigzag')}({raw} & {out.use('_U32')})"
    assert t == "bool", t
    return f"{raw} > 0"


def _py_type(field: _Field, names: _Names) -> str:
    if field.proto_type in ("message", "enum"):
        assert field.cls is not None
        return names.annotation(field.cls)
    return _PY_TYPES[field.proto_type]


def _emit_encoder(
    cls: type[Any], fields: list[_Field], declined: tuple[str, ...], names: _Names, out: _Out
) -> None:
    alias = names.cls(cls)
    out(0, f"def enc_{alias}(m: {names.annotation(cls)}) -> bytes:")
    out(1, f"if type(m) is not {alias}:")
    out(2, f"raise {out.use('Fallback')}")
    if declined:
        condition = " or ".join(f"m.{arm} is not None" for arm in declined)
        out(1, f"if {condition}:")
        out(2, "raise Fallback")
    out(1, "parts: list[bytes] = []")
    uvarint = out.use("_uvarint")
    for field in fields:
        if field.name in declined:
            continue
        t = field.proto_type
        value = f"f_{field.name}"
        wire_type = _scalar_wire_type(t) if t not in ("message", "map") else int(_wire.WIRE_LEN)
        tag = _tag(field.number, wire_type)
        len_tag = _tag(field.number, int(_wire.WIRE_LEN))
        out(1, f"# {field.name} = {field.number} ({'repeated ' if field.repeated else ''}{t})")
        out(1, f"{value} = m.{field.name}")
        if field.map_value is not None:
            entry_value = names.cls(field.map_value)
            # As prost (and _metamap) writes an entry: no empty key, no null value.
            out(1, f"for k_{field.name}, v_{field.name} in {value}.items():")
            out(2, 'entry = b""')
            out(2, f"if k_{field.name}:")
            out(3, f'raw = k_{field.name}.encode("utf-8")')
            out(3, f"entry = {_tag(1, 2)} + {uvarint}(len(raw)) + raw")
            out(2, f"if v_{field.name} is not None:")
            out(3, f"b = enc_{entry_value}(v_{field.name})")
            out(3, "if b:")
            out(4, f"entry += {_tag(2, 2)} + {uvarint}(len(b)) + b")
            out(2, f"parts += ({len_tag}, {uvarint}(len(entry)), entry)")
            continue
        if field.repeated:
            item = f"i_{field.name}"
            if t == "message":
                assert field.cls is not None
                out(1, f"for {item} in {value}:")
                out(2, f"b = enc_{names.cls(field.cls)}({item})")
                out(2, f"parts += ({len_tag}, {uvarint}(len(b)), b)")
            elif t == "string":
                out(1, f"for {item} in {value}:")
                out(2, f'raw = {item}.encode("utf-8")')
                out(2, f"parts += ({len_tag}, {uvarint}(len(raw)), raw)")
            elif t == "bytes":
                out(1, f"for {item} in {value}:")
                out(2, f"parts += ({len_tag}, {uvarint}(len({item})), {item})")
            elif t in _FIXED:
                code = _FIXED[t]
                one = out.struct(code)
                out(1, f"if {value}:")
                out(2, f"if len({value}) == 1:")
                out(3, f"b = {one}.pack({value}[0])")
                out(2, "else:")
                out(3, f'b = struct.pack(f"<{{len({value})}}{code}", *{value})')
                out(2, f"parts += ({len_tag}, {uvarint}(len(b)), b)")
            else:
                encoded = f"{out.use('_zigzag')}({item})" if t.startswith("sint") else item
                out(1, f"if {value}:")
                out(2, f'b = b"".join([{uvarint}({encoded}) for {item} in {value}])')
                out(2, f"parts += ({len_tag}, {uvarint}(len(b)), b)")
            continue
        out(1, f"if {value} is not None:" if field.presence else f"if {value}:")
        if t == "message":
            assert field.cls is not None
            out(2, f"b = enc_{names.cls(field.cls)}({value})")
            out(2, f"parts += ({tag}, {uvarint}(len(b)), b)")
        elif t == "string":
            out(2, f'raw = {value}.encode("utf-8")')
            out(2, f"parts += ({tag}, {uvarint}(len(raw)), raw)")
        elif t == "bytes":
            out(2, f"parts += ({tag}, {uvarint}(len({value})), {value})")
        elif t in _FIXED:
            out(2, f"parts += ({tag}, {out.struct(_FIXED[t])}.pack({value}))")
        elif t.startswith("sint"):
            out(2, f"parts += ({tag}, {uvarint}({out.use('_zigzag')}({value})))")
        else:
            out(2, f"parts += ({tag}, {uvarint}({value}))")
    out(1, "if m._unknown_fields:")
    out(2, "parts.append(m._unknown_fields)")
    out(1, 'return b"".join(parts)')


def _emit_decoder(
    cls: type[Any], fields: list[_Field], declined: tuple[str, ...], names: _Names, out: _Out
) -> None:
    alias = names.cls(cls)
    handled = [f for f in fields if f.name not in declined]
    out(0, f"def dec_{alias}(data: bytes, pos: int, end: int) -> {names.annotation(cls)}:")
    for field in handled:
        local = f"f_{field.name}"
        if field.map_value is not None:
            out(1, f"{local}: dict[str, {names.annotation(field.map_value)}] = {{}}")
        elif field.repeated:
            out(1, f"{local}: list[{_py_type(field, names)}] = []")
        elif field.presence:
            out(1, f"{local}: {_py_type(field, names)} | None = None")
        elif field.proto_type == "enum":
            assert field.cls is not None
            out(1, f"{local}: {_py_type(field, names)} = {names.cls(field.cls)}(0)")
        else:
            out(1, f"{local}: {_py_type(field, names)} = {_ZEROS[_PY_TYPES[field.proto_type]]}")
    groups = sorted({f.group for f in handled if f.group is not None})
    for group in groups:
        out(1, f"arm_{group} = 0")
    if not handled:
        out(1, "if pos < end:  # no fields: whatever comes is unexpected")
        out(2, f"{out.use('_unexpected')}(data, pos, end)")
        out(1, f"return {alias}()")
        return
    wide = any(_key(f.number, 7) >= 0x80 for f in handled)
    out(1, "while pos < end:")
    out(2, "key = data[pos]")
    if wide:
        out(2, "if key < 0x80:")
        out(3, "pos += 1")
        out(2, "else:")
        out(3, f"key, pos = {out.use('_varint')}(data, pos, end)")
    else:
        out(2, "pos += 1")
    first = True
    for field in handled:
        for key, body in _decode_branches(field, names, out):
            out(2, f"{'if' if first else 'elif'} key == 0x{key:02X}:  # {field.name}")
            first = False
            if field.group is not None:
                out(3, f"if arm_{field.group} and arm_{field.group} != {field.number}:")
                out(4, f"raise {out.use('Fallback')}  # betterproto2 keeps both arms")
                out(3, f"arm_{field.group} = {field.number}")
            for line in body:
                out(3, line)
    if wide:
        out(2, "else:")
        out(3, f"raise {out.use('Fallback')}")
    else:
        out(2, "else:")
        out(3, f"{out.use('_unexpected')}(data, pos - 1, end)")
    out(1, f"return {alias}({_arguments(cls, fields, declined)})")


def _arguments(cls: type[Any], fields: list[_Field], declined: tuple[str, ...]) -> str:
    """The arguments building a decoded ``cls``: positional when ``__init__`` allows it.

    Positional arguments halve the cost of building a message with many fields (a
    JoinResponse: 0.5 us instead of 1.1 us), so they are used whenever ``__init__`` takes
    exactly the metadata's fields, in order; a declined arm is passed as ``None``, its
    default.
    """
    parameters = list(inspect.signature(cls.__init__).parameters.values())[1:]
    positional = [p.name for p in parameters if p.kind is p.POSITIONAL_OR_KEYWORD]
    if positional != [f.name for f in fields] or len(parameters) != len(fields):
        return ", ".join(f"{f.name}=f_{f.name}" for f in fields if f.name not in declined)
    return ", ".join("None" if f.name in declined else f"f_{f.name}" for f in fields)


def _decode_branches(field: _Field, names: _Names, out: _Out) -> Iterator[tuple[int, list[str]]]:
    """(key, body lines) for each wire form ``field`` is read in."""
    t = field.proto_type
    local = f"f_{field.name}"
    span = out.use("_span")
    varint = out.use("_varint")
    length_key = _key(field.number, int(_wire.WIRE_LEN))
    if field.map_value is not None:
        value_cls = names.cls(field.map_value)
        k, v = f"k_{field.name}", f"v_{field.name}"
        yield (
            length_key,
            [
                f"at, pos = {span}(data, pos, end)",
                f'{k} = ""',
                f"{v}: {names.annotation(field.map_value)} | None = None",
                "while at < pos:",
                "    tag = data[at]",
                f"    if tag == 0x{_key(1, 2):02X}:",
                f"        start, at = {span}(data, at + 1, pos)",
                f'        {k} = data[start:at].decode("utf-8")',
                f"    elif tag == 0x{_key(2, 2):02X}:",
                f"        start, at = {span}(data, at + 1, pos)",
                f"        {v} = dec_{value_cls}(data, start, at)",
                "    else:",
                f"        {out.use('_unexpected')}(data, at, pos)",
                "# A missing value is a null (protobuf's map rule, and what _metamap's load does).",
                f"{local}[{k}] = {value_cls}() if {v} is None else {v}",
            ],
        )
        return
    store = f"{local}.append" if field.repeated else None

    def assign(expr: str) -> str:
        return f"{store}({expr})" if store else f"{local} = {expr}"

    if t == "message":
        assert field.cls is not None
        decoded = f"dec_{names.cls(field.cls)}(data, start, pos)"
        yield length_key, [f"start, pos = {span}(data, pos, end)", assign(decoded)]
    elif t == "string":
        text = 'data[start:pos].decode("utf-8")'
        yield length_key, [f"start, pos = {span}(data, pos, end)", assign(text)]
    elif t == "bytes":
        yield length_key, [f"start, pos = {span}(data, pos, end)", assign("data[start:pos]")]
    elif t in _FIXED:
        code = _FIXED[t]
        size = 8 if code in "dQq" else 4
        if field.repeated:
            packed = f"{out.use('_extend_packed_fixed')}(data, start, pos, {local}, {code!r})"
            yield length_key, [f"start, pos = {span}(data, pos, end)", packed]
        value = f"{out.struct(code)}.unpack_from(data, start)[0]"
        body = [f"start, pos = pos, {out.use('_fixed_end')}(pos, end, {size})", assign(value)]
        yield _key(field.number, _scalar_wire_type(t)), body
    else:
        if field.repeated:
            body = [f"start, pos = {span}(data, pos, end)"]
            if t in ("uint32", "uint64", "int32", "int64"):
                mask = out.use("_U32" if t.endswith("32") else "_U64")
                sign = (
                    "0" if t.startswith("u") else out.use("_SIGN32" if t == "int32" else "_SIGN64")
                )
                body.append(
                    f"{out.use('_read_packed_varints')}(data, start, pos, {local}, {mask}, {sign})"
                )
            else:
                read = out.use("_read_packed_varints")
                convert = _varint_conversion(field, "raw", names, out)
                body += [
                    "raws: list[int] = []",
                    f"{read}(data, start, pos, raws, -1, 0)",  # raw: converted below
                    f"{local}.extend([{convert} for raw in raws])",
                ]
            yield length_key, body
        body = [
            f"raw, pos = {varint}(data, pos, end)",
            assign(_varint_conversion(field, "raw", names, out)),
        ]
        yield _key(field.number, 0), body


_HEADER = '''\
# Generated by tools/gen_fastwire.py from the betterproto2 field metadata of the messages
# in this package (`nox -s protos`). DO NOT EDIT: change the .proto files or the generator.
"""Fast encoders and decoders of the per-step Join messages, one pair per message.

``enc_<message>(m)`` returns ``bytes(m)``; ``dec_<message>(data, pos, end)`` parses
``data[pos:end]`` as ``FromString`` would. Both raise ``Fallback`` for what they do not
cover, and the decoders raise ``ValueError`` on malformed input. The contract, and the
public functions wrapping these, are in ``trio_rlmesh.protocol._fastwire``.
"""

from __future__ import annotations

'''


def generate(roots: Sequence[Root], *, package: str) -> str:
    """The source of the codec module for ``roots``, to be placed in ``package``.

    Classes from modules under ``package`` are imported relatively, others absolutely.

    Raises:
        GenerationError: a reached field cannot be reproduced exactly, or a declined arm
            does not exist.
    """
    names = _Names(package)
    out = _Out()
    order, declined = _reachable(roots)
    field_table = []
    for cls in order:
        fields = _fields(cls)
        skipped = declined.get(cls, ())
        field_table.append((cls, tuple(f.name for f in fields if f.name not in skipped)))
        out(0, "")
        out(0, "")
        _emit_encoder(cls, fields, skipped, names, out)
        out(0, "")
        out(0, "")
        _emit_decoder(cls, fields, skipped, names, out)
    body = out.lines
    lines = _HEADER.splitlines()
    if out.structs:
        lines.append("import struct")
    lines.append("from collections.abc import Callable")
    lines.append("from typing import Any, Final")
    lines.append("")
    lines.append("from .._wire import (")
    lines += [f"    {_wire_import(n)}," for n in sorted(out.helpers, key=_wire_sort)]
    lines.append(")")
    lines += names.import_lines()
    lines.append("")
    for cls, alias in names.classes.items():
        lines.append(f"{alias} = {names.module(cls.__module__)}.{cls.__qualname__}")
    for code in sorted(out.structs):
        lines.append(f'_S_{code} = struct.Struct("<{code}")')
    lines.append("")
    lines.append("# Per message: the fields the functions below read and write (every field of")
    lines.append("# the message but the arms in DECLINED).")
    lines.append("FIELDS: Final[dict[type, tuple[str, ...]]] = {")
    for cls, handled in field_table:
        lines.append(f"    {names.cls(cls)}: {_tuple(handled)},")
    lines.append("}")
    lines.append(
        "# Per root message: the oneof arms left to betterproto2 (the functions raise Fallback)."
    )
    lines.append("DECLINED: Final[dict[type, tuple[str, ...]]] = {")
    for cls, arms in declined.items():
        if arms:
            lines.append(f"    {names.cls(cls)}: {_tuple(arms)},")
    lines.append("}")
    tail = ["", "", "# The functions above, by message class."]
    tail.append("ENCODERS: Final[dict[type, Callable[[Any], bytes]]] = {")
    tail += [f"    {names.cls(cls)}: enc_{names.cls(cls)}," for cls in order]
    tail.append("}")
    tail.append("DECODERS: Final[dict[type, Callable[[bytes, int, int], Any]]] = {")
    tail += [f"    {names.cls(cls)}: dec_{names.cls(cls)}," for cls in order]
    tail.append("}")
    return "\n".join(lines + body + tail) + "\n"


def _tuple(items: Sequence[str]) -> str:
    quoted = [f'"{item}"' for item in items]
    return f"({quoted[0]},)" if len(quoted) == 1 else f"({', '.join(quoted)})"


_WIRE_NAMES = {
    "Fallback": "Fallback",
    "_SIGN32": "SIGN32",
    "_SIGN64": "SIGN64",
    "_U32": "U32",
    "_U64": "U64",
    "_uvarint": "encode_varint",
    "_extend_packed_fixed": "extend_packed_fixed",
    "_fixed_end": "fixed_end",
    "_read_packed_varints": "read_packed_varints",
    "_span": "read_span",
    "_varint": "read_varint",
    "_unexpected": "unexpected",
    "_unzigzag": "unzigzag",
    "_zigzag": "zigzag",
}


def _wire_import(local: str) -> str:
    name = _WIRE_NAMES[local]
    return name if name == local else f"{name} as {local}"


def _wire_sort(local: str) -> tuple[int, str]:
    name = _WIRE_NAMES[local]
    return (0 if name.isupper() or name[0].isupper() else 1, name)


def load_generated(directory: Path, name: str = "_fastwire_source") -> ModuleType:
    """Import a betterproto2 output tree as the package ``name``."""
    spec = importlib.util.spec_from_file_location(
        name, directory / "__init__.py", submodule_search_locations=[str(directory)]
    )
    assert spec is not None
    assert spec.loader is not None
    package = importlib.util.module_from_spec(spec)
    sys.modules[name] = package
    spec.loader.exec_module(package)
    return package


def main(argv: Sequence[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    directory, output = Path(argv[0]), Path(argv[1])
    sys.dont_write_bytecode = True  # no __pycache__ left in the tree being generated
    package = load_generated(directory)
    source = generate(production_roots(package), package=package.__name__)
    output.write_text(source, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
