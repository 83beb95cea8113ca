"""What the runtime offers the other layers of trio-rlmesh; none of it is public API.

Users import from :mod:`trio_rlmesh.runtime`. The model side, the transports, the facade,
the CLI and the testing helpers import the runtime's internals from here and from no other
private module of it (``tests/test_layering.py`` checks that).
"""

from __future__ import annotations

from ._comparison import (
    PairComparison,
    RunSample,
    compare_pair,
    paired_order,
    performance_profiles,
)
from ._fleet import DEFAULT_FUSE_WAIT, Fleet
from ._fleetrun import FleetRun
from ._ids import mint_uuid7
from ._pool import EpisodePool
from ._spec import (
    check_count,
    check_prefetch_lead,
    check_seconds_cap,
    check_timeout,
    route_request,
    seconds_cap,
)
from ._summary import (
    ANALYSIS_EXTRA,
    RESAMPLES,
    SEED,
    Interval,
    decimals_for,
    format_estimate,
    summarize,
)
from ._telemetry import format_telemetry
from ._worker import (
    SERVING_USER_CODE_MODES,
    USER_CODE_MODES,
    ServingUserCode,
    UserCode,
    WorkerUnavailable,
    busy_worker_threads,
    check_serving_user_code,
    check_user_code,
    new_worker,
)

__all__ = [
    "ANALYSIS_EXTRA",
    "DEFAULT_FUSE_WAIT",
    "RESAMPLES",
    "SEED",
    "SERVING_USER_CODE_MODES",
    "USER_CODE_MODES",
    "EpisodePool",
    "Fleet",
    "FleetRun",
    "Interval",
    "PairComparison",
    "RunSample",
    "ServingUserCode",
    "UserCode",
    "WorkerUnavailable",
    "busy_worker_threads",
    "check_count",
    "check_prefetch_lead",
    "check_seconds_cap",
    "check_serving_user_code",
    "check_timeout",
    "check_user_code",
    "compare_pair",
    "decimals_for",
    "format_estimate",
    "format_telemetry",
    "mint_uuid7",
    "new_worker",
    "paired_order",
    "performance_profiles",
    "route_request",
    "seconds_cap",
    "summarize",
]
