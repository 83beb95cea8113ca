"""Envs the CLI tests serve by ``module:attr``."""

from __future__ import annotations

from .servers import ToyEnv

ENV = ToyEnv()


def make() -> ToyEnv:
    return ToyEnv()


NOT_AN_ENV = 42
