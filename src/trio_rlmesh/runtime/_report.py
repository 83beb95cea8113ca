"""What a run leaves behind: an :class:`EpisodeRecord` per episode, and the report."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

import attrs

from .._errors import Error
from ..protocol import read_env_contract
from ..protocol._internal import INFO_IS_SUCCESS, INFO_SUCCESS
from ._summary import RESAMPLES, SEED, RunSummary, summarize
from ._telemetry import TelemetryRow

if TYPE_CHECKING:
    from ._spec import RuntimeSessionSpec

__all__ = [
    "CANCELLED_BY_CALLER",
    "COMPLETED_REASON",
    "EndpointReport",
    "EpisodeRecord",
    "RunSetup",
    "RunStatus",
    "RuntimeReport",
    "run_ending",
    "success_from_final_info",
]

RunStatus = Literal["completed", "cancelled", "failed"]

CANCELLED_BY_CALLER = "cancelled by caller"
COMPLETED_REASON = "completed requested episodes"


def run_ending(
    *,
    interrupted: BaseException | None,
    caller_cancelled: bool,
    failure: BaseException | None,
    stopped: bool,
    cancel_reason: str | None,
) -> tuple[RunStatus, str]:
    """A run's status and reason: an interruption (``caller_cancelled`` when it is the
    caller's cancel scope) wins over a failure, a failure over a :meth:`cancel`
    (``stopped``), and a run with none of them completed."""
    if interrupted is not None:
        if caller_cancelled:
            return "cancelled", "cancelled by the caller's cancel scope"
        return "failed", f"interrupted: {type(interrupted).__name__}"
    if failure is not None:
        return "failed", str(failure)
    if stopped:
        return "cancelled", cancel_reason or CANCELLED_BY_CALLER
    return "completed", COMPLETED_REASON


def success_from_final_info(final_info: Mapping[str, Any] | None) -> bool | None:
    """The task outcome an env reported: ``is_success`` first, then ``success``.

    A bool is taken as is, an int counts when non-zero, a float when not 0.0; any other
    type (or neither key) means unknown.

    >>> success_from_final_info({"success": 1}), success_from_final_info({"is_success": "yes"})
    (True, None)
    """
    if not final_info:
        return None
    for key in (INFO_IS_SUCCESS, INFO_SUCCESS):
        if key not in final_info:
            continue
        value = final_info[key]
        if isinstance(value, bool):
            return value
        if isinstance(value, (int, float)):
            return value != 0
        return None
    return None


@attrs.frozen
class EpisodeRecord:
    """One completed episode."""

    index: int
    """0-based, in episode *start* order across the whole run."""
    env_index: int
    """The lane it ran on."""
    episode_id: str
    seed: int | None
    """The reset seed the runtime sent for it; ``None`` when the env chose."""
    trial: int
    """``trial_index_base + index``: the ``trial_index`` reset option (for envs that take one)."""
    steps: int
    reward: float
    terminated: bool
    truncated: bool
    success: bool | None
    duration_s: float
    """From its reset (or autoreset roll) to its completion, on the trio clock."""
    predict_ms: float
    """Mean duration of the predicts that served this episode (0.0 if none did)."""
    step_ms: float
    """Mean duration of this episode's env steps."""
    endpoint: str | None = None
    """The address of the env endpoint it ran on (``None`` for an env in this process)."""

    def to_json_dict(self) -> dict[str, Any]:
        """The DESIGN.md report schema for one episode."""
        return {
            "index": self.index,
            "seed": self.seed,
            "steps": self.steps,
            "reward": self.reward,
            "terminated": self.terminated,
            "truncated": self.truncated,
            "success": self.success,
            "duration_s": self.duration_s,
            "endpoint": self.endpoint,
        }


@attrs.frozen
class EndpointReport:
    """One endpoint of a fleet run: how its part ended, what it did, what it lost.

    >>> EndpointReport("127.0.0.1:5001", "completed", None, 3, 60).to_json_dict()["episodes"]
    3
    """

    endpoint: str
    """Its address, as given."""
    status: RunStatus
    """``completed`` or ``cancelled`` with the run; ``failed`` when it was lost."""
    error: str | None
    """Why it failed (``"<ErrorClass>: <message>"``); ``None`` if it did not."""
    episodes: int
    """Episodes it completed that the run counted."""
    env_step_calls: int
    retried: tuple[tuple[int, int | None], ...] = ()
    """``(index, seed)`` of the episodes it was running when it was lost: each one was
    started again on another endpoint (same index, same seed)."""
    telemetry: tuple[TelemetryRow, ...] = ()
    """Its own session-horizon rows."""

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "endpoint": self.endpoint,
            "status": self.status,
            "error": self.error,
            "episodes": self.episodes,
            "env_step_calls": self.env_step_calls,
            "retried": [{"index": index, "seed": seed} for index, seed in self.retried],
            "telemetry": [row.to_json_dict() for row in self.telemetry],
        }


@attrs.frozen
class RunSetup:
    """What a run evaluated on: the env as its contract names it, its spaces, and the
    run's episode caps (what ``trio-rlmesh compare`` checks runs agree on).

    >>> RunSetup("CartPole-v1", "Box(...)", "Discrete(n=2, ...)", 500, None).to_json_dict()["env"]
    'CartPole-v1'
    """

    env: str | None
    """The env's own id (``CartPole-v1``), as its contract names it."""
    observation_space: str | None
    """The observation space, as :mod:`trio_rlmesh.spaces` shows it (``repr``)."""
    action_space: str | None
    max_episode_steps: int | None
    """The run's cap on an episode's steps (``None``: none beyond the env's own)."""
    max_episode_seconds: float | None

    @classmethod
    def from_spec(cls, spec: RuntimeSessionSpec) -> RunSetup:
        """The setup of a session."""
        contract = spec.env_contract
        env = contract.spec.id if contract.spec is not None else None
        try:
            info = read_env_contract(contract)
        except Error:  # a report is made however the run ended, a bad contract included
            observation = action = None
        else:
            observation, action = repr(info.observation_space), repr(info.action_space)
        return cls(
            env or None, observation, action, spec.max_episode_steps, spec.max_episode_seconds
        )

    def to_json_dict(self) -> dict[str, Any]:
        return attrs.asdict(self)


@attrs.frozen
class RuntimeReport:
    """The outcome of one run: returned by ``run()``, or attached to its error as ``.report``.

    ``str(report)`` is a one-line summary; :meth:`to_json_dict` the whole report.

    >>> episode = EpisodeRecord(0, 0, "e0", 7, 0, 20, 20.0, True, False, True, 0.1, 0.0, 0.0)
    >>> report = RuntimeReport("completed", None, "s", "env", (episode,), env_step_calls=20)
    >>> print(report)
    completed: 1 episode, 20 steps, mean reward 20.000, success rate 100.0%
    """

    status: RunStatus
    reason: str | None
    session_id: str
    env_id: str
    episodes: tuple[EpisodeRecord, ...]
    """Completed episodes in completion order (never more than ``max_episodes``)."""
    env_step_calls: int
    """Env step calls made: one per vector step on a lockstep env (however many lanes it
    has), one per lane step on a lane endpoint; steps of episodes that were not counted
    (cut short by the end of the run, or beyond ``max_episodes``) included."""
    telemetry: tuple[TelemetryRow, ...] = ()
    """Session-horizon rows."""
    advisories: tuple[str, ...] = ()
    """Things worth knowing that did not fail the run (discarded frames, failed evictions, ...)."""
    hook_errors: int = 0
    """Observer hooks that raised (each was logged and ignored)."""
    endpoints: tuple[EndpointReport, ...] = ()
    """A fleet run's endpoints, in the order given (empty for a one-endpoint run)."""
    setup: RunSetup | None = None
    """The env and the episode caps the run had (``None`` when it never got to drive)."""
    pairing: str | None = None
    """How a spec'd model in this process was paired with the env (the adapter's
    ``explain()``); ``None`` when no spec was involved, or the model was served."""
    started_at: datetime | None = None
    """When :func:`~trio_rlmesh.run_local` (or ``run_remote``, ``run``) started connecting,
    in UTC; ``None`` for a report made elsewhere (a :class:`RuntimeDriver` run directly)."""
    duration_s: float | None = None
    """Wall-clock seconds from that connect to the close of the env and the model."""
    summary_resamples: int = RESAMPLES
    """Bootstrap resamples of :attr:`summary`'s intervals (0: a quick summary, with
    normal-approximation intervals and no IQM, that imports neither rliable nor scipy)."""
    summary_seed: int = SEED
    """The seed of :attr:`summary`'s bootstrap."""
    _summaries: dict[str | None, RunSummary] = attrs.field(
        factory=dict, init=False, repr=False, eq=False
    )

    @property
    def total_episodes(self) -> int:
        """How many episodes were counted (``len(episodes)``)."""
        return len(self.episodes)

    @property
    def total_steps(self) -> int:
        """The counted episodes' steps, summed: RLMesh's ``RunResult.total_steps``.

        On a vector env every lane's steps count; steps of an episode the run cut short
        do not (see :attr:`env_step_calls` for the calls made).
        """
        return sum(e.steps for e in self.episodes)

    @property
    def mean_reward(self) -> float:
        """Mean episode reward (``0.0`` with no episodes)."""
        if not self.episodes:
            return 0.0
        return sum(e.reward for e in self.episodes) / len(self.episodes)

    @property
    def success_rate(self) -> float | None:
        """The fraction of episodes the env reported a success for, as RLMesh's
        ``RunResult.success_rate``: ``None`` with no episodes or when any episode's
        success is unknown (an outcome is never inferred from ``terminated``)."""
        if not self.episodes or any(e.success is None for e in self.episodes):
            return None
        return sum(1 for e in self.episodes if e.success) / len(self.episodes)

    @property
    def summary(self) -> RunSummary:
        """Interval estimates of the episodes' returns (computed once, on first use; with
        the ``analysis`` extra that takes a moment). See ``docs/analysis.md``."""
        return self.summary_of(None)

    def summary_of(self, endpoint: str | None) -> RunSummary:
        """:attr:`summary` of the episodes one endpoint of a fleet ran (``None``: all).

        Its timing is the run's: ``steps_per_s`` is that endpoint's steps per second of
        the whole run.
        """
        found = self._summaries.get(endpoint)
        if found is None:
            # Index order, which does not depend on which endpoint or lane finished first:
            # the resampling draws rows by position.
            episodes = sorted(self.episodes, key=lambda e: e.index)
            if endpoint is not None:
                episodes = [e for e in episodes if e.endpoint == endpoint]
            found = summarize(
                [e.reward for e in episodes],
                steps=[e.steps for e in episodes],
                successes=[e.success for e in episodes],
                started_at=self.started_at,
                duration_s=self.duration_s,
                resamples=self.summary_resamples,
                seed=self.summary_seed,
            )
            self._summaries[endpoint] = found
        return found

    def __str__(self) -> str:
        count = len(self.episodes)
        text = (
            f"{self.status}: {count} episode{'' if count == 1 else 's'}, "
            f"{self.total_steps} steps, mean reward {self.mean_reward:.3f}"
        )
        if self.success_rate is not None:
            text += f", success rate {self.success_rate:.1%}"
        if self.reason:
            text += f" ({self.reason})"
        return text

    def to_json_dict(self) -> dict[str, Any]:
        """The JSON report schema of ``docs/cli.md`` (``json.dumps`` it as is)."""
        data: dict[str, Any] = {
            "status": self.status,
            "reason": self.reason,
            "total_steps": self.total_steps,
            "env_step_calls": self.env_step_calls,
            "mean_reward": self.mean_reward,
            "success_rate": self.success_rate,
            "episodes": [episode.to_json_dict() for episode in self.episodes],
            "telemetry": [row.to_json_dict() for row in self.telemetry],
            "summary": self.summary.to_json_dict(),
            "setup": None if self.setup is None else self.setup.to_json_dict(),
            "pairing": self.pairing,
        }
        if self.endpoints:
            data["endpoints"] = [
                {**part.to_json_dict(), "summary": self.summary_of(part.endpoint).to_json_dict()}
                for part in self.endpoints
            ]
        return data
