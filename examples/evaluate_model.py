"""Evaluate a numpy model on CartPole twice: in process, then served over gRPC.

    python examples/evaluate_model.py                     # serves CartPole itself
    python examples/evaluate_model.py --env 127.0.0.1:50051   # any env server

The same seeds and a deterministic policy give the same episodes both ways: ``run_local``
calls the model in this process, ``serve_model`` + ``run_remote`` call it through a
ModelService, exactly as an RLMesh runtime would.
"""

from __future__ import annotations

import argparse

import numpy as np
import trio

from trio_rlmesh import RunLocalOptions, run_local, run_remote
from trio_rlmesh.model import Model
from trio_rlmesh.transports.grpc import serve_env, serve_model


class LeanPolicy(Model):
    """Push the cart toward the side the pole leans to: simple, not good (tens of steps)."""

    def predict(self, observation):
        angle = observation[2]
        return np.int64(angle > 0)

    def predict_batch(self, observations):
        # Optional: one vectorized call for every lane waiting on the model.
        return (observations[:, 2] > 0).astype(np.int64)


def show(title, report):
    summary = f"{report.status}, {report.total_steps} steps, mean reward {report.mean_reward:.2f}"
    print(f"{title}: {summary}")
    for episode in report.episodes:
        print(
            f"  episode {episode.index}  seed {episode.seed}  steps {episode.steps:4d}  "
            f"reward {episode.reward:6.1f}  terminated {episode.terminated}  "
            f"truncated {episode.truncated}"
        )


async def main(env_address: str | None) -> None:
    async with trio.open_nursery() as nursery:
        if env_address is None:
            import gymnasium

            env_address = await nursery.start(serve_env, gymnasium.make("CartPole-v1"))
        options = RunLocalOptions(env_address, episode_seeds=(0, 1, 2), max_episodes=3)

        with trio.fail_after(60):
            local = await run_local(LeanPolicy(), options)
        show(f"in process against {env_address}", local)

        model_address = await nursery.start(serve_model, LeanPolicy())
        with trio.fail_after(60):
            remote = await run_remote(model_address, options)
        show(f"served at {model_address}", remote)

        same = [e.reward for e in local.episodes] == [e.reward for e in remote.episodes]
        print("same episodes both ways:", same)
        nursery.cancel_scope.cancel()  # stop the servers


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default=None, help="env server address (default: serve one)")
    trio.run(main, parser.parse_args().env)
