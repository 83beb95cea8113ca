"""The targets the issues set for the side-by-side ratios, and the table that checks them.

A target is the ratio ours/theirs (median of per-round ratios) a scenario must reach, or,
for a figure a scenario reports beside its ratio (``Comparison.figures``, e.g. a mean
batch size), the value that figure must reach. The table is printed after the scenario
table; ``met`` is judged on this run's medians only,
so read it with the noise note of ``bench/README.md`` in mind.
"""

from __future__ import annotations

from collections.abc import Sequence

from bench_measure import Comparison

TARGETS: dict[str, tuple[str, float]] = {
    "1a": ("run_local vs rlmesh.run, single lane, rlmesh.EnvServer", 0.8),
    "1b": ("rlmesh.run -> our serve-env vs -> rlmesh.EnvServer", 0.9),
    "2-vec16": ("16-lane vector env, batched model, vs rlmesh.run", 1.2),
    # "No slower than today": the grpclib-based transport this backend replaced ran 1a at
    # 0.33-0.43 and 1b at 0.41-0.48 of rlmesh on this machine.
    "1a-grpclib": ("1a with our client on the grpclib backend", 0.43),
    "1b-grpclib": ("1b with our server on the grpclib backend", 0.48),
    "4-inproc": ("run(model, env) in process vs the bare Gymnasium loop", 0.25),
    "4i-inproc-inline": ("as 4, user_code='inline'", 0.25),
    "5s": ("sync gym.RemoteEnv step loop vs rlmesh.RemoteEnv", 1.5),
    "5a": ("async open_remote_env step loop vs rlmesh.RemoteEnv", 2.0),
    "5v": ("RemoteVectorEnv (16 lanes) vs rlmesh.RemoteVectorEnv, env-steps", 1.2),
    "6-run": ("run(model, env) vs rlmesh.run(model, env)", 3.0),
    "6i-run-inline": ("as 6, user_code='inline'", 3.0),
    "7-fleet8-vs-1": ("fleet run over 8 endpoints vs 1 endpoint (5 ms steps), env-steps", 6.0),
    "7-fleet8-vs-rlmesh8": ("fleet over 8 endpoints vs 8 concurrent rlmesh.run, env-steps", 1.0),
    "7-batch": ("mean predict batch over 8 endpoints (rows, not a ratio)", 4.0),
    "7c-fleet8-vs-rlmesh8": ("CPU-bound model: fleet over 8 vs 8 rlmesh.run, env-steps", 3.0),
    "7c-batch": ("CPU-bound model: mean predict batch over 8 endpoints (rows)", 4.0),
    "7r-record": ("in-process CartPole recorded (Minari) vs unrecorded", 0.8),
    "8a-adapter-camera": ("adapter step, 256->224 camera stack 2 + state, vs rlmesh", 0.5),
    "8b-adapter-state": ("adapter step, state and text only, vs rlmesh.adapters", 1.0),
    "8c-adapted-run": ("adapted run(model, env), 64x64 camera stack 2 + state, vs rlmesh", 2.0),
}
"""Scenario or figure id -> (figure, target)."""


def format_targets(results: Sequence[Comparison]) -> str:
    """One line per measured scenario (or figure) that has a target: its value, the target,
    met or not."""
    measured = [(r.scenario, r.ratio) for r in results]
    measured += [item for r in results for item in r.figures.items()]
    rows = [(key, *TARGETS[key], value) for key, value in measured if key in TARGETS]
    if not rows:
        return ""
    width = max(len(figure) for _, figure, _, _ in rows)
    lines = ["== targets (ratio ours/theirs, this run) =="]
    for scenario, figure, target, ratio in rows:
        verdict = "met" if ratio >= target else "NOT met"
        lines.append(
            f"{scenario:<17} {figure:<{width}}  {ratio:6.2f}  target >= {target:<5g} {verdict}"
        )
    return "\n".join(lines)
