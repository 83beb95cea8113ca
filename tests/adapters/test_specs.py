"""Specs as data: construction rules, RLMesh's JSON documents, the reader's refusals.

The expected documents and messages were taken from ``rlmesh.adapters`` 0.1.0 (the interop
suite compares against the wheel directly on generated specs).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from trio_rlmesh import SpecError
from trio_rlmesh import adapters as adapt

GRIPPER = adapt.Action(adapt.Actuator(adapt.ACTION_GRIPPER, 1))


def full_image() -> adapt.Image:
    return adapt.Image(
        adapt.IMAGE_PRIMARY,
        64,
        64,
        layout="chw",
        channels=3,
        dtype="float32",
        normalize=(-1, 1),
        lead_dims=1,
        upside_down=True,
        resample="bilinear_aa",
        allow_upscale=True,
        fit=("crop", "pad"),
        stack=4,
        crop=0.9,
        crop_mode="slice",
        jpeg_quality=95,
        channel_order="bgr",
        render=128,
        stride=2,
        stack_pad="black",
        part="head",
    )


def test_an_image_document_has_rlmesh_fields_in_rlmesh_order() -> None:
    spec = adapt.ModelSpec(input={"img": full_image()}, output=GRIPPER)
    assert json.dumps(spec.to_dict()) == (
        '{"input": {"img": {"type": "image", "role": "image/primary", "part": "head", '
        '"height": 64, "width": 64, "layout": "chw", "channels": 3, "dtype": "float32", '
        '"normalize": [-1.0, 1.0], "lead_dims": 1, "upside_down": true, "resample": '
        '"bilinear_aa", "allow_upscale": true, "fit": ["crop", "pad"], "stack": 4, "crop": 0.9, '
        '"crop_mode": "slice", "jpeg_quality": 95, "channel_order": "bgr", "render": [128, 128], '
        '"offsets": [-6, -4, -2, 0], "stack_pad": "black"}}, "output": {"components": [{"role": '
        '"action/gripper", "dim": 1, "encoding": null, "range": null, "binary": false}], '
        '"clip": null}}'
    )


def test_a_state_document_writes_scales_per_axis_under_axis_keys() -> None:
    state = adapt.State(
        adapt.EEF_ROT,
        encoding=("rot6d", "quat_xyzw"),
        range=(-1, 1),
        post_rotate=adapt.Rotation(encoding="quat_xyzw", value=(0, 0, 0, 1)),
        scale=(1, 2, 3, 4, 5, 6),
        offset=0.5,
        frame="world",
        provenance=("sensed", "estimated"),
        part="left_arm",
        pad_to=10,
        dtype="float64",
        reshape=(2, 5),
        container="list",
        clip=(-2, 2),
    )
    document = adapt.ModelSpec(input=state, output=GRIPPER).to_dict()["input"]
    assert json.dumps(document) == (
        '{"type": "state", "components": [{"role": "proprio/eef_rot", "encoding": ["rot6d", '
        '"quat_xyzw"], "range": [-1.0, 1.0], "post_rotate": {"encoding": "quat_xyzw", "value": '
        '[0.0, 0.0, 0.0, 1.0]}, "offset": 0.5, "axis_scale": [1.0, 2.0, 3.0, 4.0, 5.0, 6.0], '
        '"frame": "world", "provenance": ["sensed", "estimated"], "part": "left_arm"}], '
        '"pad_to": 10, "dtype": "float64", "reshape": [2, 5], "container": "list", "clip": '
        "[-2.0, 2.0]}"
    )


def test_concat_parts_write_bare_roles_constants_and_previous_actions() -> None:
    concat = adapt.Concat(
        adapt.EEF_POS,
        adapt.State(adapt.JOINT_POS, dim=2, optional=True, fill=0.5),
        adapt.Constant(dim=2, fill=1.0),
        adapt.Constant(dim=1),
        adapt.Previous("action/gripper", fill=0.1),
        adapt.State("x/q", labels=("p", "q")),
        pad_to=20,
        clip=(0, 1),
    )
    document = adapt.ModelSpec(input=concat, output=GRIPPER).to_dict()["input"]
    assert document["components"] == [
        "proprio/eef_pos",
        {"role": "proprio/joint_pos", "dim": 2, "optional": True, "fill": 0.5},
        {"dim": 2, "fill": 1.0},
        {"dim": 1},
        {"role": "action/gripper", "source": "action", "fill": 0.1},
        {"role": "x/q", "labels": ["p", "q"]},
    ]


def test_env_tags_document_and_sorted_json() -> None:
    tags = adapt.EnvTags(
        observation={
            "b": adapt.StateTag(adapt.EEF_ROT, ("quat_xyzw",), (-1, 1), frame="world"),
            "a": adapt.ImageTag(adapt.IMAGE_PRIMARY, "chw", True, part="head"),
            "c": adapt.Split(adapt.Field(adapt.EEF_POS, 3), adapt.Field(None, 2)),
            "d": (adapt.TextTag(adapt.INSTRUCTION),),
        },
        action=adapt.Action(adapt.Actuator(None, 2, fill=3.0), clip=(-1, 1)),
    )
    document = tags.to_dict()
    # Dict nodes come out with sorted keys, whatever order they were written in.
    assert list(document["observation"]) == ["a", "b", "c", "d"]
    assert document["observation"]["b"] == {
        "type": "state",
        "role": "proprio/eef_rot",
        "encoding": "quat_xyzw",
        "range": [-1.0, 1.0],
        "frame": "world",
    }
    assert document["observation"]["c"]["fields"][1] == {
        "role": None,
        "dim": 2,
        "encoding": None,
        "range": None,
    }
    assert document["action"] == {
        "components": [{"dim": 2, "encoding": None, "range": None, "binary": False, "fill": 3.0}],
        "clip": [-1.0, 1.0],
    }
    assert tags.to_json().startswith('{"action": {"clip": [-1.0, 1.0], "components": [{')
    assert tags.to_metadata() == {adapt.ENV_METADATA_KEY: document}


@pytest.mark.parametrize(
    "spec",
    [
        adapt.ModelSpec(input={"img": full_image()}, output=GRIPPER),
        adapt.ModelSpec(
            input=(adapt.Text(adapt.INSTRUCTION, "list", "go"), {"s": adapt.State("x/s", index=1)}),
            output=adapt.Action(
                adapt.Actuator("x/a", 3, "axis_angle", (0, 1), scale=(1, 2, 3), invert=True),
                adapt.Actuator("x/b", 1, binary=True, threshold=0.5, optional=True, fill=1.0),
            ),
        ),
    ],
)
def test_model_specs_read_back_equal(spec: adapt.ModelSpec) -> None:
    again = adapt.ModelSpec.from_dict(spec.to_dict())
    assert again == spec
    assert hash(again) == hash(spec)
    assert adapt.ModelSpec.from_json(spec.to_json()) == spec


def test_one_parameterized_concat_part_reads_back_as_a_state() -> None:
    concat = adapt.Concat(adapt.State("x/s", dim=2), pad_to=4)
    again = adapt.ModelSpec.from_dict(adapt.ModelSpec(concat, GRIPPER).to_dict()).input
    assert again == adapt.State("x/s", dim=2, pad_to=4)


def test_dict_nodes_compare_and_hash_regardless_of_key_order() -> None:
    one = adapt.ModelSpec({"a": adapt.Text("x/a"), "b": adapt.Text("x/b")}, GRIPPER)
    two = adapt.ModelSpec({"b": adapt.Text("x/b"), "a": adapt.Text("x/a")}, GRIPPER)
    assert one == two
    assert hash(one) == hash(two)


def test_specs_are_dataclasses_as_in_rlmesh() -> None:
    image = dataclasses.replace(adapt.Image(adapt.IMAGE_PRIMARY, size=8), width=4)
    assert (image.height, image.width) == (8, 4)
    assert [f.name for f in dataclasses.fields(adapt.Constant)] == ["dim", "fill"]


CONSTRUCTION: list[tuple[Any, str]] = [
    (lambda: adapt.Image("r", height=2, size=4), "pass size=, or height=/width=, not both"),
    (lambda: adapt.Image("r", crop=0.5, crop_area=0.5), "pass crop (a side fraction)"),
    (lambda: adapt.Image("r", crop=1.5), "crop must be a fraction in (0, 1], got 1.5"),
    (lambda: adapt.Image("r", jpeg_quality=0), "jpeg_quality must be between 1 and 100, got 0"),
    (lambda: adapt.Image("r", render=5000), "render height must be between 1 and 4096"),
    (lambda: adapt.Image("r", stride=2, offsets=(-2, 0)), "pass stride=, or offsets=, not both"),
    (lambda: adapt.Image("r", fill=3), "fill only applies to an optional camera"),
    (lambda: adapt.Image("r", normalize=(1, 0)), "range min must be <= max, got (1.0, 0.0)"),
    (lambda: adapt.State("r", dim=1, index=0), "set dim or index, not both"),
    (lambda: adapt.State("r", source="action", range=(0, 1)), "carries only part/labels/dim/fill"),
    (lambda: adapt.State("r", fill=1.0), "fill applies only to an optional part"),
    (
        lambda: adapt.State("r", post_rotate=adapt.Rotation(encoding="rot6d", value=())),
        "post_rotate needs a rotation encoding",
    ),
    (lambda: adapt.State("r", labels=("a", "a")), "labels must not repeat an axis name"),
    (lambda: adapt.State("r", labels=("a",), dim=2), "dim 2 disagrees with the 1 labels"),
    (lambda: adapt.State("r", scale="x"), "scale must be a number or a sequence of numbers"),
    (lambda: adapt.State("r", encoding=("rot6d", 3)), "an encoding accept-set must contain only"),
    (lambda: adapt.Concat(), "Concat needs at least one part"),
    (lambda: adapt.Concat(adapt.Constant(dim=2)), "a state input of only constant parts"),
    (lambda: adapt.Concat(adapt.State("r", pad_to=3)), "a State used as a part must keep"),
    (lambda: adapt.Custom(), "set exactly one of transform="),
    (lambda: adapt.Actuator("r", 0), "Actuator 'r': dim must be >= 1, got 0"),
    (lambda: adapt.Actuator(None, 1, binary=True), "a role-less (opaque) Actuator carries only"),
    (lambda: adapt.Actuator("r", 1, fill=1.0), "fill applies only to a role-less (opaque)"),
    (lambda: adapt.Actuator("r", 1, clip=True), "clip=True clamps to range, so range must be set"),
    (lambda: adapt.Actuator("r", 2, labels=("a",)), "dim 2 disagrees with the 1 labels"),
    (lambda: adapt.Action(), "Action needs at least one actuator"),
    (lambda: adapt.Field("r", 0), "Field 'r': dim must be >= 1, got 0"),
    (lambda: adapt.Split(), "Split needs at least one Field"),
    (
        lambda: adapt.Split(adapt.Field("r", 1), adapt.Field("r", 1)),
        "Split declares a role more than once",
    ),
    (lambda: adapt.CustomEncoding("nope", from_base=abs), "CustomEncoding.base must be a native"),
    (lambda: adapt.CustomEncoding("rot6d"), "needs at least one of from_base"),
    (lambda: adapt.CustomEncoding("rot6d", abs, "m:f"), "CustomEncoding arms must agree"),
    (
        lambda: adapt.EnvTags({"a": adapt.TextTag("x/t"), "b": adapt.TextTag("x/t")}, GRIPPER),
        "env tags declare text role 'x/t' more than once",
    ),
    (lambda: adapt.Rotation.from_matrix([[1, 0], [0, 1]]), "Rotation.from_matrix needs a 3x3"),
]


@pytest.mark.parametrize(("build", "message"), CONSTRUCTION)
def test_construction_refuses_what_can_never_resolve(build: Any, message: str) -> None:
    with pytest.raises(ValueError, match=None) as caught:
        build()
    assert message in str(caught.value)
    assert isinstance(caught.value, SpecError)


def test_concat_refuses_a_part_of_the_wrong_type() -> None:
    with pytest.raises(TypeError, match="Concat parts must be role strings"):
        adapt.Concat(3)  # type: ignore[arg-type]


READER: list[tuple[str, dict[str, Any], str]] = [
    (
        "model",
        {"input": {"type": "image", "role": "r", "stack": 0}},
        "invalid model spec at input: stack must be between 1 and 64, got 0",
    ),
    (
        "model",
        {"input": {"type": "text", "role": "r"}},
        "invalid model spec: missing field `output`",
    ),
    (
        "model",
        {"input": {"type": "image", "role": "r", "stack": 65}, "output": {"components": []}},
        "invalid model spec at input: stack must be between 1 and 64, got 65",
    ),
    (
        "model",
        {
            "input": {"a": [{"type": "image", "role": "r", "bogus": 0}]},
            "output": {"components": []},
        },
        (
            'invalid model spec: feature "a[0]" declares unrecognized field "bogus"; upgrade the '
            "runtime or drop the field (or prefix it `x-` to mark it ignorable)"
        ),
    ),
    (
        "model",
        {"input": {"type": "weird"}, "output": {"components": []}},
        'invalid model spec: model input "<root>" declares unrecognized kind "weird"',
    ),
    (
        "model",
        {"input": {"type": 5}, "output": {"components": []}},
        (
            'invalid model spec at input: the reserved key "type" may not name a dict child (model '
            "input tree)"
        ),
    ),
    (
        "model",
        {"input": {"type": "image", "role": "r", "layout": "xyz"}, "output": {"components": []}},
        "invalid model spec at input: unknown variant `xyz`, expected `hwc` or `chw`",
    ),
    (
        "model",
        {"input": {"type": "image", "role": "r", "height": -1}, "output": {"components": []}},
        "invalid model spec at input: must be a non-negative integer, got -1",
    ),
    (
        "model",
        {"input": {"type": "image", "role": "r", "upside_down": 1.5}, "output": {"components": []}},
        "invalid model spec at input: invalid type: floating point `1.5`, expected a boolean",
    ),
    (
        "model",
        {"input": {"type": "state", "components": []}, "output": {"components": []}},
        "invalid model spec at input: a state input needs at least one component",
    ),
    (
        "model",
        {
            "input": {"type": "state", "components": [{"role": "r", "dim": 1, "index": 0}]},
            "output": {"components": []},
        },
        'invalid model spec at input: state part Some("r") sets both dim and index',
    ),
    (
        "model",
        {
            "input": {"type": "state", "components": ["r"], "reshape": [-1, -1]},
            "output": {"components": []},
        },
        "invalid model spec at input: reshape allows at most one -1 (infer) dimension",
    ),
    (
        "model",
        {
            "input": {"type": "text", "role": "r"},
            "output": {"components": [{"role": "a", "dim": 1}], "clip": [0, 1, 2]},
        },
        "invalid model spec at output.clip: range must be a pair of numbers [min, max], got 3",
    ),
    (
        "model",
        {
            "input": {"type": "text", "role": "r"},
            "output": {"components": [{"role": "a", "dim": 1, "threshold": "x"}]},
        },
        (
            'invalid model spec at output.components[0].threshold: invalid type: string "x", '
            "expected a number"
        ),
    ),
    (
        "env",
        {
            "observation": {"type": "split", "fields": [{"dim": 1, "range": [0, 1]}]},
            "action": {"components": []},
        },
        (
            "invalid env tags at observation: a role-less field (a skip) cannot carry an encoding, "
            "range, frame, provenance, part or labels"
        ),
    ),
    (
        "env",
        {
            "observation": {"type": "text", "role": "r"},
            "action": {"components": [{"role": "a", "dim": 1, "fill": 2}]},
        },
        (
            'invalid env tags at action: actuator "a": fill applies only to a role-less (opaque) '
            "or optional actuator"
        ),
    ),
    (
        "env",
        {"observation": {"type": "text", "role": "r"}, "action": {"components": []}, "x": 1},
        "invalid env tags at x: unknown field `x`, expected `observation` or `action`",
    ),
    (
        "env",
        {"observation": {"type": "audio"}, "action": {"components": []}},
        'invalid env tags: observation "<root>" declares unrecognized kind "audio"',
    ),
    # A scale or offset is a scalar or a non-empty per-axis vector, on a state part as on an
    # actuator.
    (
        "model",
        {
            "input": {
                "type": "state",
                "components": [{"role": "r", "scale": 2, "axis_scale": [1]}],
            },
            "output": {"components": []},
        },
        (
            'invalid model spec at input: state part Some("r"): sets both scale and axis_scale; '
            "a quantity is a scalar or a per-axis vector, not both"
        ),
    ),
    (
        "model",
        {
            "input": {"type": "state", "components": [{"role": "r", "axis_offset": []}]},
            "output": {"components": []},
        },
        (
            'invalid model spec at input: state part Some("r"): axis_offset must carry at least '
            "one value"
        ),
    ),
    (
        "model",
        {
            "input": {"type": "text", "role": "r"},
            "output": {"components": [{"role": "a", "dim": 1, "offset": 0, "axis_offset": [1]}]},
        },
        (
            'invalid model spec at output: actuator Some("a"): sets both offset and axis_offset; '
            "a quantity is a scalar or a per-axis vector, not both"
        ),
    ),
    (
        "model",
        {
            "input": {"type": "text", "role": "r"},
            "output": {"components": [{"role": "a", "dim": 1, "axis_scale": []}]},
        },
        (
            'invalid model spec at output: actuator Some("a"): axis_scale must carry at least one '
            "value"
        ),
    ),
]


@pytest.mark.parametrize(("side", "document", "message"), READER)
def test_the_reader_refuses_with_rlmesh_messages(
    side: str, document: dict[str, Any], message: str
) -> None:
    spec_class = adapt.EnvTags if side == "env" else adapt.ModelSpec
    with pytest.raises(ValueError) as caught:
        spec_class.from_dict(document)
    assert str(caught.value).startswith(message)


def test_ignorable_fields_are_accepted_and_dropped() -> None:
    document = {
        "observation": {"type": "image", "role": "r", "x-note": 1},
        "action": {"components": [{"role": "a", "dim": 1, "x-note": 2}]},
    }
    assert adapt.EnvTags.from_dict(document).observation == adapt.ImageTag("r")


def test_a_custom_input_cannot_be_published() -> None:
    with pytest.raises(ValueError, match="holds an in-process callable"):
        adapt.ModelSpec(adapt.Custom(transform=len), GRIPPER).to_dict()
    with pytest.raises(ValueError, match="cannot be published in v1 contract metadata"):
        adapt.ModelSpec(adapt.Custom(entrypoint="m:f"), GRIPPER).to_dict()


def test_an_in_process_encoding_arm_travels_as_a_marker() -> None:
    encoding = adapt.CustomEncoding("quat_xyzw", from_base=abs, name="mine")
    spec = adapt.ModelSpec(adapt.State(adapt.EEF_ROT, encoding=encoding), GRIPPER)
    part = spec.to_dict()["input"]["components"][0]
    assert part["encoding"] == {"base": "quat_xyzw", "name": "mine", "from_base": "<local>"}


def test_metadata_round_trip_and_refusal() -> None:
    tags = adapt.EnvTags(adapt.TextTag(adapt.INSTRUCTION), GRIPPER)
    assert adapt.EnvTags.from_metadata(tags.to_metadata()) == tags
    assert adapt.EnvTags.from_metadata({}) is None
    with pytest.raises(adapt.AdapterResolutionError, match="must hold a mapping"):
        adapt.EnvTags.from_metadata({adapt.ENV_METADATA_KEY: 3})


def test_non_finite_numbers_have_no_json_form() -> None:
    with pytest.raises(ValueError, match="Out of range float values are not JSON compliant"):
        adapt.EnvTags(adapt.StateTag("x/s", range=(0, float("inf"))), GRIPPER).to_dict()
