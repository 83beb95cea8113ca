"""The package's error hierarchy, rooted at :class:`Error`.

It lives at the bottom of the layer stack, importing nothing of the package, so that every
layer (spaces, protocol, runtime, transports) raises errors of one family. Users import
every error from ``trio_rlmesh``, its one public home (the gRPC client's
``RemoteEnvError`` and the conformance checks' ``ConformanceError`` excepted: they live
with the transport and the checks that raise them, and derive from :class:`Error` too).

Every error carries ``recoverable`` (whether the same route could retry the
operation), and where it applies the ``operation`` (``"env.step"``,
``"model.predict"``, ...), the runtime ``step`` and the ``lane`` it failed in,
and the peer ``address``. A failed run's error also carries the partial
:class:`~trio_rlmesh.runtime.RuntimeReport` as ``report``.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "EnvError",
    "Error",
    "HookError",
    "ModelError",
    "OperationTimeout",
    "ProtocolError",
    "SpecError",
    "TransportError",
]


class Error(Exception):
    """Base of every error trio-rlmesh raises on purpose.

    Args:
        message: what went wrong and, where possible, what to do about it.
        recoverable: whether retrying the same operation on the same route may succeed.
        operation: the operation that failed (``"env.reset"``, ``"env.step"``,
            ``"model.predict"``, ``"model.reset_adapter"``, ``"env.close"``, ...).
        step: the runtime step (vector steps taken so far) at the failure.
        lane: the env lane involved, when one is.
        address: the peer address, for transport-backed endpoints.
        code: a wire error code name (``"INVALID_ACTION"``, ``"INTERNAL"``, ...) when one came.
    """

    default_recoverable = False

    def __init__(
        self,
        message: str,
        *,
        recoverable: bool | None = None,
        operation: str | None = None,
        step: int | None = None,
        lane: int | None = None,
        address: str | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.recoverable = self.default_recoverable if recoverable is None else recoverable
        self.operation = operation
        self.step = step
        self.lane = lane
        self.address = address
        self.code = code
        # Typed loosely so that this bottom layer needs nothing from the runtime above it.
        self.report: Any = None
        """The partial :class:`~trio_rlmesh.runtime.RuntimeReport` of the run this error
        failed (``None`` when it was raised before driving started, or outside a run)."""

    def __str__(self) -> str:
        return self.message

    def with_context(self, **fields: Any) -> Error:
        """Fill context fields that are still unset (never overwrites) and return ``self``."""
        for name, value in fields.items():
            if value is not None and getattr(self, name, None) is None:
                setattr(self, name, value)
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        kwargs = {
            "recoverable": self.recoverable,
            "operation": self.operation,
            "step": self.step,
            "lane": self.lane,
            "address": self.address,
            "code": self.code,
        }
        return (_rebuild, (type(self), self.message, kwargs))


def _rebuild(cls: type[Error], message: str, kwargs: dict[str, Any]) -> Error:
    return cls(message, **kwargs)


class SpecError(Error, ValueError):
    """A session spec, option or contract that cannot run; the message says what to change."""


class EnvError(Error):
    """The env (or its server) failed an operation; ``code`` holds the wire EnvErrorCode name."""


class ModelError(Error):
    """The model (or its server) failed or declined; ``code`` holds the wire ModelErrorCode name."""


class TransportError(Error, ConnectionError):
    """A connection could not be made, dropped, or a peer answered with a gRPC error status."""

    default_recoverable = False


class OperationTimeout(Error, TimeoutError):
    """An operation outlived its deadline. Also a builtin :class:`TimeoutError`."""

    default_recoverable = True

    def __init__(self, message: str, *, timeout: float | None = None, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.timeout = timeout


class ProtocolError(Error):
    """A peer broke rlmesh-wire-v1: a malformed or unexpected message, a mismatched route."""


class HookError(Error):
    """A transform hook raised; the run fails with this error (``__cause__`` is the original)."""
