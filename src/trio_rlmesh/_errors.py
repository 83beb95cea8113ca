"""The package's error hierarchy, rooted at :class:`Error`.

It lives at the bottom of the layer stack, importing nothing of the package, so that every
layer (spaces, protocol, runtime, transports) raises errors of one family, each defined
here. Users import every error from ``trio_rlmesh``, its one public home. A few errors
live with the code that raises them, each with one public home too, and derive from
:class:`Error`: the gRPC client's ``RemoteEnvError`` and ``RemoteEnvTimeout``
(:mod:`trio_rlmesh.transports.grpc`), the conformance checks' ``ConformanceError``
(:mod:`trio_rlmesh.testing`) and the render decoder's ``PngError`` (:mod:`trio_rlmesh.gym`).

Every error carries ``recoverable`` (whether the same route could retry the
operation), and where it applies the ``operation`` (``"env.step"``,
``"model.predict"``, ...), the runtime ``step`` and the ``lane`` it failed in,
and the peer ``address``. A failed run's error also carries the partial
:class:`~trio_rlmesh.runtime.RuntimeReport` as ``report``.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "ROOT",
    "CodecError",
    "EnvError",
    "Error",
    "HookError",
    "MetaConversionError",
    "ModelError",
    "OperationTimeout",
    "ProtocolError",
    "RecordingError",
    "SpaceError",
    "SpecError",
    "TransportError",
    "where",
]

ROOT = "$"
"""The path of a space tree's root, in the path notation of :mod:`trio_rlmesh.spaces`."""


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


def where(operation: str, address: str | None, step: int | None, lane: int | None) -> str:
    """``env.step to tcp://h:p at step 3 on lane 1``: how messages name an operation.

    >>> where("model.predict", "tcp://h:1", None, None)
    'model.predict to tcp://h:1'
    """
    parts = [operation]
    if address is not None:
        parts.append(f"to {address}")
    if step is not None:
        parts.append(f"at step {step}")
    if lane is not None:
        parts.append(f"on lane {lane}")
    return " ".join(parts)


class TransportError(Error, ConnectionError):
    """A connection could not be made, dropped, or a peer answered with a gRPC error status.

    Its message names the operation where it failed (:func:`where`); the step and the lane
    a caller learns later (:meth:`with_context`: the transport does not know the runtime's
    step) join that place in the message too.
    """

    default_recoverable = False

    def with_context(self, **fields: Any) -> Error:
        """Fill context fields that are still unset, and name them where the message
        names the operation."""
        if self.operation is None:
            return super().with_context(**fields)
        before = where(self.operation, self.address, self.step, self.lane)
        super().with_context(**fields)
        after = where(self.operation, self.address, self.step, self.lane)
        if after != before and before in self.message:
            self.message = self.message.replace(before, after, 1)
            self.args = (self.message,)
        return self


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


class RecordingError(Error):
    """Recording failed: a dataset or video could not be written, or the recorded
    episodes disagree with the run's own count. The run is stopped; what was written
    before stays loadable."""


class SpaceError(SpecError):
    """A space that is not valid on rlmesh-wire-v1, or cannot be converted.

    Also a :class:`ValueError`. ``str(error)`` reads ``"<path>: <problem>"``.

    Attributes:
        path: where in the space tree the problem is (``$`` is the root, e.g. ``$.obs[2]``).
        problem: what is wrong and what would be right, without the path.
    """

    def __init__(self, problem: str, *, path: str = ROOT, **kwargs: Any) -> None:
        super().__init__(f"{path}: {problem}", **kwargs)
        self.path = path
        self.problem = problem

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_space_error, (type(self), self.problem, self.path))


def _rebuild_space_error(cls: type[SpaceError], problem: str, path: str) -> SpaceError:
    return cls(problem, path=path)


class CodecError(Error, ValueError):
    """A value that cannot be encoded for, or leaves that cannot be decoded as, a space.

    Also a :class:`ValueError`. ``str(error)`` reads
    ``"<path>: <problem> (expected <expected>, got <actual>)"``.

    Attributes:
        path: the leaf (or inner node) of the space the problem is at, e.g. ``$.a[1]``.
        problem: what is wrong, without the path.
        expected: what the codec needed there.
        actual: what it found.
    """

    def __init__(
        self, problem: str, *, path: str = ROOT, expected: object, actual: object, **kwargs: Any
    ) -> None:
        super().__init__(f"{path}: {problem} (expected {expected}, got {actual})", **kwargs)
        self.path = path
        self.problem = problem
        self.expected = expected
        self.actual = actual

    def __reduce__(self) -> tuple[Any, ...]:
        return (
            _rebuild_codec_error,
            (type(self), self.problem, self.path, self.expected, self.actual),
        )


def _rebuild_codec_error(
    cls: type[CodecError], problem: str, path: str, expected: object, actual: object
) -> CodecError:
    return cls(problem, path=path, expected=expected, actual=actual)


class MetaConversionError(Error, TypeError):
    """A Python value has no MetaValue form; the message names its path.

    Also a :class:`TypeError`.
    """
