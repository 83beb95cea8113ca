"""Serve an env and evaluate a model in one trio run, with no sockets and no real time.

``memory://NAME`` addresses are served and reached inside one trio run by the default
(trio) gRPC backend: the bytes are exactly those a socket would carry (HTTP/2, gRPC
framing, rlmesh-wire-v1 messages), but nothing leaves the process. With user code inline
(no worker threads), the whole exchange runs under trio's MockClock, so deadlines and
keepalives cost no real time: this is how to test a server and a runtime together.
"""

from functools import partial

import gymnasium
import numpy as np
import trio
import trio.testing

from trio_rlmesh import RunLocalOptions, run_local
from trio_rlmesh.transports.grpc import serve_env


class Policy:
    def predict(self, observation: np.ndarray) -> np.int64:
        return np.int64(observation[2] > 0)


async def main() -> None:
    env = gymnasium.make("CartPole-v1")
    async with trio.open_nursery() as nursery:
        serve = partial(serve_env, env, "memory://cartpole", user_code="inline")
        address = await nursery.start(serve)
        options = RunLocalOptions(address, max_episodes=3, base_seed=0, user_code="inline")
        report = await run_local(Policy(), options)
        nursery.cancel_scope.cancel()
    print(f"{address}: {report.status}, {len(report.episodes)} episodes")


if __name__ == "__main__":
    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
