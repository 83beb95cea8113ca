"""A synchronous training-style loop over a remote env (no trio, no async in sight).

    python examples/train_remote_env.py              # serves CartPole itself, in a subprocess
    python examples/train_remote_env.py --env ADDR   # any env server (ours or rlmesh.EnvServer)

``gymnasium.make("trio_rlmesh/Remote-v0", address=...)`` gives an ordinary Gymnasium env, so
the usual wrappers apply. The "training" is hill climbing on a linear CartPole policy: try a
perturbed weight vector for one episode and keep it when it scores better.
"""

from __future__ import annotations

import argparse
import subprocess
import sys

import gymnasium
import numpy as np

import trio_rlmesh.gym  # noqa: F401 - registers trio_rlmesh/Remote-v0 with Gymnasium


def train(address: str, iterations: int) -> None:
    env = gymnasium.make("trio_rlmesh/Remote-v0", address=address, max_episode_steps=200)
    env = gymnasium.wrappers.RecordEpisodeStatistics(env)
    rng = np.random.default_rng(0)
    best_weights, best_return = np.zeros(4), -np.inf
    with env:
        print(f"observation space {env.observation_space}, action space {env.action_space}")
        for iteration in range(iterations):
            weights = best_weights + rng.normal(scale=0.5, size=4)
            obs, _ = env.reset(seed=iteration)
            done = False
            while not done:
                action = int(obs @ weights > 0)
                obs, _, terminated, truncated, info = env.step(action)
                done = terminated or truncated
            episode_return = float(info["episode"]["r"])
            if episode_return > best_return:
                best_weights, best_return = weights, episode_return
        print(f"{iterations} episodes, best return {best_return:.0f}")


def serve_cartpole() -> tuple[subprocess.Popen[str], str]:
    """``trio-rlmesh serve-env`` in a subprocess; it prints its address once serving."""
    server = subprocess.Popen(
        [sys.executable, "-m", "trio_rlmesh", "serve-env", "gymnasium:CartPole-v1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert server.stdout is not None
    address = server.stdout.readline().strip()
    if not address:
        raise SystemExit(f"the env server did not start: {server.communicate()[1].strip()}")
    return server, address


def stop(server: subprocess.Popen[str]) -> None:
    """SIGTERM, then wait; the server's notice that it is stopping is expected, not shown."""
    server.terminate()
    _, errors = server.communicate()
    if server.returncode != 0:
        print(f"the env server exited with status {server.returncode}: {errors.strip()}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", help="an env server's address (default: serve CartPole)")
    parser.add_argument("--iterations", type=int, default=15)
    args = parser.parse_args()
    if args.env:
        train(args.env, args.iterations)
    else:
        server, address = serve_cartpole()
        try:
            train(address, args.iterations)
        finally:
            stop(server)
