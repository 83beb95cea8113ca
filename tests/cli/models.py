"""Models the CLI tests load with ``--model tests.cli.models:<name>``."""

from __future__ import annotations

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
