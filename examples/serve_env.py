"""Serve Gymnasium's CartPole-v1 over rlmesh-wire-v1 until Ctrl-C (or for --seconds N).

    python examples/serve_env.py                 # serve until Ctrl-C
    python examples/serve_env.py --seconds 30    # stop by itself after 30 s
    python examples/serve_env.py --bind 127.0.0.1:50051

Any rlmesh-wire-v1 runtime can drive the printed address: ``trio-rlmesh run --env ADDR``,
``examples/evaluate_model.py --env ADDR``, or RLMesh's own runtime.
"""

from __future__ import annotations

import argparse
import math
import signal

import gymnasium
import trio

from trio_rlmesh.transports.grpc import serve_env


async def stop_on_signal(scope: trio.CancelScope, *, task_status=trio.TASK_STATUS_IGNORED):
    """Turn the first SIGINT/SIGTERM into a cancellation of ``scope`` (no KeyboardInterrupt)."""
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        task_status.started()
        async for signum in signals:
            print(f"received {signal.Signals(signum).name}", flush=True)
            scope.cancel()
            return


async def main(bind: str, seconds: float) -> None:
    # serve_env runs until its cancel scope is cancelled, then drains the requests in
    # progress and closes the env. A deadline ("--seconds") and a signal both just cancel.
    with trio.CancelScope() as scope:
        async with trio.open_nursery() as nursery:
            await nursery.start(stop_on_signal, scope)
            address = await nursery.start(serve_env, gymnasium.make("CartPole-v1"), bind)
            print(f"serving CartPole-v1 at {address}", flush=True)
            scope.deadline = trio.current_time() + seconds  # counted from when serving began
    print("stopped", flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bind", default="127.0.0.1:0", help="host:port (port 0: any free)")
    parser.add_argument(
        "--seconds", type=float, default=math.inf, help="serve this long once serving"
    )
    args = parser.parse_args()
    trio.run(main, args.bind, args.seconds)
