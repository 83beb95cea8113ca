"""``trio-rlmesh explain``: how a spec'd model pairs with an env, without running an episode;
and the pairing ``run`` prints before it starts.

Both read the env's contract as a run sees it (a handshake with the env server, or with the
env served in this process) and resolve the model's spec against it with the rule the model
host uses (:func:`~trio_rlmesh.adapters._internal.adapter_for`), so what they print is what
the run applies.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any, Literal

import trio

from ..adapters._internal import adapter_for, pairing_failure
from ._exit import EXIT_OK, UsageError, describe
from ._targets import (
    add_env_kwargs_options,
    add_grpc_backend_option,
    check_address,
    env_kwargs,
    is_address,
    load_env_target,
    load_model_target,
)
from ._terminal import open_console
from ._tokens import add_token_options, resolve_token

if TYPE_CHECKING:
    from rich.console import Console

    from ..adapters import Adapter
    from ..protocol import EnvContractInfo

__all__ = ["add_explain_parser", "env_contract", "explain_command", "pairing", "show_pairing"]


def add_explain_parser(commands: Any) -> None:
    """Add ``explain`` to the script's subcommands."""
    p: argparse.ArgumentParser = commands.add_parser(
        "explain",
        help="show how a spec'd model pairs with an env",
        description=(
            "Resolve the model's spec (its ModelSpec) against the tags the env publishes and "
            "print the pairing: which env entry feeds each model input and how, which model "
            "slice feeds each env actuator, and the advisories. Runs no episode; exit status "
            "2 when the pairing cannot be resolved."
        ),
    )
    p.add_argument(
        "--env", required=True, metavar="TARGET", help="gymnasium:<id>, module:attr or an address"
    )
    p.add_argument("--model", required=True, help="module:attr (a model declaring a spec)")
    add_env_kwargs_options(p)
    add_grpc_backend_option(p)
    add_token_options(p, "auth token for the env server")
    p.set_defaults(handler=explain_command)


async def env_contract(
    address: str, token: str | None, backend: Literal["trio", "grpclib"]
) -> EnvContractInfo:
    """The contract the env server at ``address`` publishes (one handshake)."""
    from ..protocol import read_env_contract
    from ..transports.grpc import open_env_client

    async with open_env_client(address, token=token, backend=backend) as client:
        return read_env_contract(client.contract)


def pairing(model: Any, model_label: str, contract: EnvContractInfo) -> Adapter | None:
    """The adapter between ``model``'s spec and the env, or ``None`` for a model without a
    spec (read as declared: a spec only ``load()`` sets is resolved by the run itself).

    Raises:
        UsageError: the pairing cannot be resolved (the model host's words).
    """
    try:
        return adapter_for(getattr(model, "spec", None), contract)
    except ValueError as exc:
        raise UsageError(pairing_failure(model_label, f"env {contract.env_id!r}", exc)) from exc


def show_pairing(console: Console, adapter: Adapter, title: str) -> None:
    """The pairing as ``run`` and ``explain`` print it: a title, ``explain()``, then each
    advisory on a line of its own."""
    console.print(title)
    console.print(adapter.explain())
    for advisory in adapter.advisories():
        console.print(f"advisory ({advisory.severity}): {advisory.message}")


def explain_command(args: argparse.Namespace) -> int:
    """Entry point of ``trio-rlmesh explain``; returns the process exit status."""
    console = open_console(sys.stdout)
    try:
        model = load_model_target(args.model)
        token = resolve_token(args, "env")
        contract = trio.run(_contract, args, token)
        adapter = pairing(model, repr(args.model), contract)
        if adapter is None:
            console.print(
                f"model {args.model!r} declares no spec: it sees env {contract.env_id!r}'s "
                "observations as they are (nothing to pair)"
            )
            return EXIT_OK
        show_pairing(console, adapter, f"{args.model} on {contract.env_id}:")
    except Exception as exc:  # the one place a failure becomes an exit status
        failure = describe(exc)
        sys.stderr.write(f"trio-rlmesh explain: {failure.message}\n")
        return failure.exit_code
    return EXIT_OK


async def _contract(args: argparse.Namespace, token: str | None) -> EnvContractInfo:
    """The env's contract: from its server, or from the env served here for one handshake."""
    from ..transports.grpc import serve_env

    kwargs = env_kwargs(args.env_kwargs, args.env_arg)
    if is_address(args.env):
        if kwargs:
            raise UsageError(
                "--env-kwargs/--env-arg configure an env served in-process; "
                f"--env {args.env} is a server address"
            )
        return await env_contract(check_address(args.env, "--env"), token, args.grpc_backend)
    env = load_env_target(args.env, kwargs)
    async with trio.open_nursery() as nursery:
        address = await nursery.start(serve_env, env, "127.0.0.1:0")
        try:
            return await env_contract(address, None, args.grpc_backend)
        finally:
            nursery.cancel_scope.cancel()
