"""``_codec.decode``: a message that does not decode is refused in words naming the field."""

from __future__ import annotations

import pytest

from trio_rlmesh.protocol import env_v1, model_v1
from trio_rlmesh.transports.grpc._codec import decode
from trio_rlmesh.transports.grpc._status import GrpcError, Status

MARK = "\x00MARK\x00"


def _corrupted(message: object) -> bytes:
    """``message``'s bytes with the string field holding :data:`MARK` made invalid UTF-8."""
    data = bytes(message)  # type: ignore[call-overload]
    assert data.count(MARK.encode()) == 1
    return data.replace(MARK.encode(), b"\xff" * len(MARK))


def _predict(context: model_v1.AdapterContext, episode: str = "e1") -> model_v1.JoinRequest:
    return model_v1.JoinRequest(
        predict=model_v1.PredictRequest(
            context=context, episode_info=[model_v1.EpisodeInfo(episode_id=episode)]
        ),
        request_id="r1",
    )


@pytest.mark.parametrize(
    ("message_type", "message", "field"),
    [
        (env_v1.JoinResponse, env_v1.JoinResponse(request_id=MARK), "JoinResponse.request_id"),
        (
            model_v1.JoinRequest,
            _predict(model_v1.AdapterContext(session_id="s", env_id=MARK, request_id="r")),
            "AdapterContext.env_id",
        ),
        (
            model_v1.JoinRequest,
            _predict(model_v1.AdapterContext(session_id="s", env_id="e", request_id="r"), MARK),
            "EpisodeInfo.episode_id",
        ),
        (
            model_v1.JoinResponse,
            model_v1.JoinResponse(error=model_v1.ModelError(message=MARK), request_id="r"),
            "ModelError.message",
        ),
    ],
)
def test_invalid_utf8_names_the_field(message_type: type, message: object, field: str) -> None:
    with pytest.raises(GrpcError) as caught:
        decode(message_type, _corrupted(message))
    assert caught.value.status is Status.INTERNAL
    assert caught.value.message == (
        f"failed to decode {message_type.__name__}: {field} is not valid UTF-8"
    )
