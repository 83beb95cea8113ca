"""One model, three env servers, three evaluations running at once in one trio nursery.

    python examples/concurrent_envs.py

Each ``run_local`` call is its own session (its own connection, seeds and report); they run
concurrently in one nursery, and the whole evaluation sits under one deadline. Results are
printed side by side.
"""

from __future__ import annotations

import gymnasium
import numpy as np
import trio

from trio_rlmesh import RunLocalOptions, run_local
from trio_rlmesh.transports.grpc import serve_env

SEEDS = {"A": (0, 1, 2, 3), "B": (10, 11, 12, 13), "C": (20, 21, 22, 23)}


class LeanPolicy:
    """Any object with a numpy ``predict`` is a model; no base class needed."""

    def predict(self, observation):
        return np.int64(observation[2] > 0)  # push toward the side the pole leans to


async def main() -> None:
    reports = {}
    async with trio.open_nursery() as servers:
        addresses = {
            name: await servers.start(serve_env, gymnasium.make("CartPole-v1")) for name in SEEDS
        }

        async def evaluate(name: str) -> None:
            seeds = SEEDS[name]
            options = RunLocalOptions(addresses[name], episode_seeds=seeds, max_episodes=len(seeds))
            reports[name] = await run_local(LeanPolicy(), options)

        with trio.fail_after(60):  # one deadline for the three runs together
            async with trio.open_nursery() as runs:
                for name in SEEDS:
                    runs.start_soon(evaluate, name)
        servers.cancel_scope.cancel()  # the runs are done: stop the three servers

    names = list(SEEDS)
    print("episode " + "".join(f"{name + ' ' + addresses[name]:>26}" for name in names))
    for row in range(len(SEEDS["A"])):
        cells = []
        for name in names:
            episode = reports[name].episodes[row]
            cells.append(f"seed {episode.seed:>2}: {episode.steps:>3} steps")
        print(f"{row:>7} " + "".join(f"{cell:>26}" for cell in cells))
    print(
        "mean    " + "".join(f"{f'{reports[name].mean_reward:.1f} reward':>26}" for name in names)
    )
    print("status  " + "".join(f"{reports[name].status:>26}" for name in names))


if __name__ == "__main__":
    trio.run(main)
