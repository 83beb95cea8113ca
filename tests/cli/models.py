"""Models the CLI tests load with ``--model tests.cli.models:<name>``."""

from __future__ import annotations

import sys
import threading
import time
from typing import Any

import numpy as np


class AlwaysLeft:
    def predict(self, observation: Any) -> np.int64:
        return np.int64(0)


class Broken:
    def predict(self, observation: Any) -> np.int64:
        raise ValueError("deliberate failure in predict")


class NoPredict:
    pass


class FailsOnFifthPredict:
    """Acts for four predicts, then raises: on a 2-step env, two episodes finish first."""

    def __init__(self) -> None:
        self.calls = 0

    def predict(self, observation: Any) -> np.int64:
        self.calls += 1
        if self.calls == 5:
            raise ValueError("deliberate failure on the fifth predict")
        return np.int64(0)


class SlowAfterFirst:
    """Quick for ``QUICK`` predicts, then each predict sleeps (slow, never hung) and says so."""

    QUICK = 4
    DELAY = 5.0

    def __init__(self) -> None:
        self.calls = 0

    def predict(self, observation: Any) -> np.int64:
        self.calls += 1
        if self.calls > self.QUICK:
            print("model: slow predict", file=sys.stderr, flush=True)
            time.sleep(self.DELAY)
        return np.int64(0)


class HangsAfterQuick(SlowAfterFirst):
    """Quick for 12 predicts (enough for ``--user-code auto`` to run the next inline), then
    each predict blocks for 1000 s: hung, as far as a test can tell."""

    QUICK = 12
    DELAY = 1000.0


class RecordsThreads:
    """Pushes left, and notes the name of the thread each predict ran on (in ``threads``)."""

    threads: list[str] = []  # noqa: RUF012 - read by the test that runs it

    def predict(self, observation: Any) -> np.int64:
        RecordsThreads.threads.append(threading.current_thread().name)
        return np.int64(0)


class SeesThreads:
    """Pushes left, and notes the names of the threads alive at its first predict (in ``seen``)."""

    seen: list[str] = []  # noqa: RUF012 - read by the test that runs it

    def __init__(self) -> None:
        SeesThreads.seen = []

    def predict(self, observation: Any) -> np.int64:
        if not SeesThreads.seen:
            SeesThreads.seen = [thread.name for thread in threading.enumerate()]
        return np.int64(0)


def _arm_policy() -> Any:
    from tests.interop.envs import arm_example

    return arm_example().ReachPolicy


ArmPolicy = _arm_policy()
"""``examples/adapted_arm.py``'s spec'd model."""
