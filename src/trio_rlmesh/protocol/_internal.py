"""What the protocol layer offers the other layers of trio-rlmesh; none of it is public API.

Users import from :mod:`trio_rlmesh.protocol`: the message namespaces, the protocol version
and the conversions. The wire vocabulary the peers exchange (capability, metadata and info
keys, handshake helpers), the fast per-step codec and the raw varint helpers are for the
layers that speak the protocol, which import them from here and from no other private
module of the protocol package (``tests/test_layering.py`` checks that).
"""

from __future__ import annotations

from ._carried import CarriedValue, carried_batch
from ._checked import decode_checked
from ._constants import (
    CAP_CONCURRENT_PREDICT,
    CAP_OBSERVATION_HISTORY,
    CAP_SUBSET_STEP,
    CAPABILITY_TRUE,
    COMPONENT_ENV,
    COMPONENT_MODEL,
    DEFAULT_ENV_TIMEOUT_MS,
    EXTRA_BUILD_COHORT,
    EXTRA_BUILD_SOURCE,
    EXTRA_WORKFLOW_BASE,
    EXTRA_WORKFLOW_EDITION,
    INFO_FINAL_INFO,
    INFO_FINAL_INFO_MASK,
    INFO_IS_SUCCESS,
    INFO_SUCCESS,
    MAX_MESSAGE_SIZE,
    META_AUTORESET_MODE,
    META_CONFORMANCE_WARNING,
    META_RESET_OPTIONS,
    RESET_OPTION_TRIAL_INDEX,
    check_token,
    has_capability,
    highest_shared_edition,
)
from ._fastwire import (
    decode_env_join_request,
    decode_env_join_response,
    decode_model_join_request,
    decode_model_join_response,
    encode_env_join,
    encode_env_join_response,
    encode_env_timing_tail,
    encode_model_join,
    encode_model_join_response,
)
from ._wire import WIRE_LEN, WIRE_VARINT, encode_varint, read_varint, skip_field

__all__ = [
    "CAPABILITY_TRUE",
    "CAP_CONCURRENT_PREDICT",
    "CAP_OBSERVATION_HISTORY",
    "CAP_SUBSET_STEP",
    "COMPONENT_ENV",
    "COMPONENT_MODEL",
    "DEFAULT_ENV_TIMEOUT_MS",
    "EXTRA_BUILD_COHORT",
    "EXTRA_BUILD_SOURCE",
    "EXTRA_WORKFLOW_BASE",
    "EXTRA_WORKFLOW_EDITION",
    "INFO_FINAL_INFO",
    "INFO_FINAL_INFO_MASK",
    "INFO_IS_SUCCESS",
    "INFO_SUCCESS",
    "MAX_MESSAGE_SIZE",
    "META_AUTORESET_MODE",
    "META_CONFORMANCE_WARNING",
    "META_RESET_OPTIONS",
    "RESET_OPTION_TRIAL_INDEX",
    "WIRE_LEN",
    "WIRE_VARINT",
    "CarriedValue",
    "carried_batch",
    "check_token",
    "decode_checked",
    "decode_env_join_request",
    "decode_env_join_response",
    "decode_model_join_request",
    "decode_model_join_response",
    "encode_env_join",
    "encode_env_join_response",
    "encode_env_timing_tail",
    "encode_model_join",
    "encode_model_join_response",
    "encode_varint",
    "has_capability",
    "highest_shared_edition",
    "read_varint",
    "skip_field",
]
