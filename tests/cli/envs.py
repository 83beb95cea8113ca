"""Envs the CLI tests serve by ``module:attr``."""

from __future__ import annotations

from tests.transports.grpc.env_server_support import SlowEnv

ENV = SlowEnv()


def make() -> SlowEnv:
    return SlowEnv()


NOT_AN_ENV = 42
