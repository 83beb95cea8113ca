from __future__ import annotations

import subprocess
import sys

import trio_rlmesh.spaces

EXPECTED = {
    "BoundsKind",
    "Box",
    "CodecError",
    "DType",
    "Deviation",
    "DeviationKind",
    "Dict",
    "Discrete",
    "LeafBuffer",
    "MultiBinary",
    "MultiDiscrete",
    "Space",
    "SpaceError",
    "Text",
    "Tuple",
    "check_batch",
    "decode_batch",
    "decode_lanes",
    "decode_value",
    "dtype_range",
    "encode_batch",
    "encode_lanes",
    "encode_value",
    "fits_dtype",
    "from_gymnasium",
    "iter_leaves",
    "leaf_paths",
    "stack_lanes",
    "to_gymnasium",
    "unstack",
    "validate",
}


def test_public_surface_is_pinned() -> None:
    assert set(trio_rlmesh.spaces.__all__) == EXPECTED
    for name in EXPECTED:
        assert hasattr(trio_rlmesh.spaces, name), name


def test_errors_are_in_the_package_family() -> None:
    assert issubclass(trio_rlmesh.spaces.SpaceError, trio_rlmesh.SpecError)
    assert issubclass(trio_rlmesh.spaces.CodecError, trio_rlmesh.Error)
    assert issubclass(trio_rlmesh.spaces.CodecError, ValueError)


def test_importing_spaces_does_not_import_gymnasium() -> None:
    code = "import sys, trio_rlmesh.spaces; assert 'gymnasium' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
