"""Wire constants of rlmesh-wire-v1 as 0.1.0 peers use them."""

from __future__ import annotations

from typing import Final

from .._errors import SpecError

PROTOCOL_GENERATION: Final = "rlmesh-wire-v1"
"""The only generation this package speaks; servers compare it after trimming whitespace."""

WORKFLOW_EDITION: Final = "2026.06"
"""The edition a stable 0.1.0 release build speaks and prefers."""

SUPPORTED_WORKFLOW_EDITIONS: Final = (WORKFLOW_EDITION,)
"""Editions this package accepts, most preferred first."""

MAX_MESSAGE_SIZE: Final = 256 * 1024 * 1024
"""Largest gRPC message either direction, as in the reference (256 MiB)."""

CAPABILITY_TRUE: Final = "true"
"""A capability counts as present only when its value is exactly this string."""

CAP_SUBSET_STEP: Final = "subset_step"
"""Env servers whose lanes step and reset individually (one env per lane) advertise this."""

CAP_CONCURRENT_PREDICT: Final = "rlmesh.model.concurrent_predict.v1"
"""Model servers that answer pipelined Join requests out of order advertise this."""

CAP_OBSERVATION_HISTORY: Final = "rlmesh.model.observation_history.v1"
"""Model servers that accept observation-history rows advertise this."""

COMPONENT_ENV: Final = "rlmesh-env"
"""PeerInfo component named by whoever speaks on the env service (client or server)."""

COMPONENT_MODEL: Final = "rlmesh-model"
"""PeerInfo component named by whoever speaks on the model service."""

# PeerInfo.extra keys every peer sends.
EXTRA_WORKFLOW_BASE: Final = "rlmesh.workflow.base"
EXTRA_WORKFLOW_EDITION: Final = "rlmesh.workflow.edition"
EXTRA_BUILD_COHORT: Final = "rlmesh.build.cohort"
EXTRA_BUILD_SOURCE: Final = "rlmesh.build.source"

# Reserved metadata keys.
META_ENV_TAGS: Final = "rlmesh.adapters.v1.env_tags"
META_RESET_OPTIONS: Final = "rlmesh.env.v1.reset_options"
"""Env metadata key listing the reset-option keys an env understands (e.g. ``trial_index``)."""
META_CONFORMANCE_WARNING: Final = "rlmesh.conformance.warning"
META_AUTORESET_MODE: Final = "autoreset_mode"
INFO_FINAL_INFO: Final = "final_info"
INFO_FINAL_INFO_MASK: Final = "_final_info"
INFO_IS_SUCCESS: Final = "is_success"
INFO_SUCCESS: Final = "success"

RESET_OPTION_TRIAL_INDEX: Final = "trial_index"
"""Reserved reset-option key carrying the trial index, sent only to envs that declare it."""

DEFAULT_ENV_TIMEOUT_MS: Final = 300_000
"""``timeout_ms`` the reference runtime puts on every env reset and step."""


def has_capability(capabilities: dict[str, str], key: str) -> bool:
    """Whether ``key`` is advertised, using the reference's exact-match rule.

    >>> has_capability({"subset_step": "true"}, CAP_SUBSET_STEP)
    True
    >>> has_capability({"subset_step": "True"}, CAP_SUBSET_STEP)
    False
    """
    return capabilities.get(key) == CAPABILITY_TRUE


def edition_sort_key(edition: str) -> tuple[str, bool, str]:
    """Order editions as the reference does: base, then suffixed cohorts above the bare one.

    >>> sorted(["2026.06-0.1.0-rc.5", "2026.06"], key=edition_sort_key)
    ['2026.06', '2026.06-0.1.0-rc.5']
    """
    base, sep, suffix = edition.strip().partition("-")
    return (base, bool(sep), suffix)


def highest_shared_edition(*lists: tuple[str, ...] | list[str]) -> str | None:
    """The highest edition present in every list (trimmed, exact match), or ``None``.

    >>> highest_shared_edition(["2026.06"], ("2026.06", "2027.01"))
    '2026.06'
    >>> highest_shared_edition(["2026.06"], ["2027.01"]) is None
    True
    """
    if not lists:
        return None
    shared = {e.strip() for e in lists[0] if e.strip()}
    for other in lists[1:]:
        shared &= {e.strip() for e in other if e.strip()}
    return max(shared, key=edition_sort_key) if shared else None


def check_token(token: str | None) -> str | None:
    """An auth token as every client and server of this package takes it: ``None`` for no
    authentication, else a string that is not blank.

    A blank token is refused rather than taken for "none": it is almost always an unset
    variable, and a server serving with it would have authentication off.

    >>> check_token("s3cret"), check_token(None)
    ('s3cret', None)
    """
    if token is not None and not token.strip():
        raise SpecError(
            f"token must not be blank (an unset variable?), got {token!r}; give the token, "
            "or None to go without authentication"
        )
    return token
