"""The env host's one error: an in-band ``EnvError`` a session answers with.

A served env sends it on the Join stream (the stream goes on, unless it is not
recoverable); the in-process env raises it as it is: it is an :class:`~trio_rlmesh.EnvError`.
"""

from __future__ import annotations

from typing import Any, Final

from ..._errors import EnvError
from ...protocol import env_v1

__all__ = ["Code", "WireError", "user_failure"]

Code = env_v1.EnvErrorCode

_RECOVERABLE_CODES: Final = frozenset(
    {Code.TIMEOUT, Code.INVALID_ACTION, Code.NOT_READY, Code.BUSY, Code.UNSUPPORTED}
)


class WireError(EnvError):
    """An env failure with its wire code (``wire_code``; ``code`` is the code's name).

    Recoverability follows the reference's table unless given.
    """

    def __init__(
        self,
        wire_code: env_v1.EnvErrorCode,
        message: str,
        recoverable: bool | None = None,
        **context: Any,
    ) -> None:
        if recoverable is None:
            recoverable = wire_code in _RECOVERABLE_CODES
        super().__init__(message, recoverable=recoverable, code=Code(wire_code).name, **context)
        self.wire_code = wire_code

    def to_proto(self) -> env_v1.EnvError:
        """The in-band ``EnvError`` message."""
        return env_v1.EnvError(
            code=self.wire_code, message=self.message, is_recoverable=self.recoverable
        )


def user_failure(op: str, exc: BaseException) -> WireError:
    """The env's own code raised: INTERNAL, as RLMesh's server words it."""
    return WireError(Code.INTERNAL, f"{op} failed: {type(exc).__name__}: {exc}")
