"""Step a remote vector env by hand from a trio program, under one deadline.

    python examples/step_vector_env_in_trio.py              # serves 4 CartPole lanes itself
    python examples/step_vector_env_in_trio.py --env ADDR   # any vector env server

The server steps its lanes together and autoresets them (NEXT_STEP); the client gets
batched numpy arrays, exactly as from a local Gymnasium vector env.
"""

from __future__ import annotations

import argparse

import gymnasium
import numpy as np
import trio

from trio_rlmesh.gym import open_remote_vector_env
from trio_rlmesh.transports.grpc import serve_env


def policy(observations: np.ndarray) -> np.ndarray:
    """Push every cart toward the side its pole leans to, all lanes at once (a weak policy:
    episodes end within a few dozen steps)."""
    return (observations[:, 2] > 0).astype(np.int64)


async def drive(address: str, steps: int) -> None:
    async with open_remote_vector_env(address, request_timeout=5.0) as envs:
        print(f"{envs.num_envs} lanes, autoreset {envs.metadata['autoreset_mode'].name}")
        observations, _ = await envs.reset(seed=0)  # lane i is seeded with 0 + i
        returns = np.zeros(envs.num_envs)
        finished: list[float] = []
        for _ in range(steps):
            observations, rewards, terminated, truncated, _ = await envs.step(policy(observations))
            returns += rewards
            for lane in np.flatnonzero(terminated | truncated):
                finished.append(float(returns[lane]))
                returns[lane] = 0.0  # the server resets this lane on the next step
        print(f"{steps} steps, {len(finished)} episodes, mean return {np.mean(finished):.1f}")


async def main(address: str | None, steps: int) -> None:
    with trio.fail_after(60):  # one deadline over everything
        async with trio.open_nursery() as nursery:
            if address is None:
                vector = gymnasium.make_vec("CartPole-v1", num_envs=4, vectorization_mode="sync")
                address = await nursery.start(serve_env, vector)
            await drive(address, steps)
            nursery.cancel_scope.cancel()  # stop the server, if we started one


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", help="an env server's address (default: serve 4 lanes)")
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args()
    trio.run(main, args.env, args.steps)
