"""Evaluate a numpy policy against an env server from a trio program, with a deadline."""

import sys

import numpy as np
import trio

from trio_rlmesh import RunLocalOptions, run_local
from trio_rlmesh.transports.grpc import serve_env


class Policy:
    def predict(self, obs):
        return np.int64(obs[2] + 0.3 * obs[3] > 0)  # push toward the falling side


async def main(address=None):
    async with trio.open_nursery() as nursery:
        if address is None:  # no server given: serve CartPole on loopback ourselves
            import gymnasium

            address = await nursery.start(serve_env, gymnasium.make("CartPole-v1"))
        with trio.move_on_after(60):  # our cancel scope always wins
            report = await run_local(
                Policy(), RunLocalOptions(address, max_episodes=3, base_seed=0)
            )
            print(report.status, [e.reward for e in report.episodes])
        nursery.cancel_scope.cancel()


if __name__ == "__main__":
    trio.run(main, *sys.argv[1:])
