"""The env host: a Gymnasium env (or vector env, or one env per lane) as rlmesh-wire-v1
messages, with no I/O. The gRPC env server and the in-process env both serve through it,
so an env behaves the same whichever way it is run.

See :mod:`._session` for the theory of operation.
"""

from __future__ import annotations

from ._errors import Code as Code
from ._errors import WireError as WireError
from ._session import EnvHost as EnvHost
from ._session import EnvSession as EnvSession
from ._session import LaneCall as LaneCall
from ._session import RequestPlan as RequestPlan
from ._session import plan_timings as plan_timings
from ._session import run_plan as run_plan
from ._shapes import LaneResult as LaneResult
from ._shapes import is_vector_env as is_vector_env
from ._values import ValidationPolicy as ValidationPolicy

__all__ = [
    "Code",
    "EnvHost",
    "EnvSession",
    "LaneCall",
    "LaneResult",
    "RequestPlan",
    "ValidationPolicy",
    "WireError",
    "is_vector_env",
    "plan_timings",
    "run_plan",
]
