"""The abuse probe (issue 23): our env server while another connection attacks it.

Usage: ``python bench/bench_abuse.py [--quick] [--backend trio|grpclib|both] [--json PATH]``
(``nox -s probe`` runs it for both backends).

One ``trio-rlmesh serve-env gymnasium:CartPole-v1`` runs in a subprocess. A well-behaved
client (ours, in this process) steps it continuously and times every step. For each attack,
an attacker subprocess (:mod:`tests.transports.grpc.hostile`'s frames, on a raw socket)
floods the server for a few seconds, reconnecting whenever the server cuts it off:

* **rapid reset**: HEADERS + RST_STREAM pairs, 1000 per write;
* **PING flood**: 10 000 PINGs per write, while reading the answers;
* **CONTINUATION flood**: a HEADERS frame and 63 CONTINUATION frames of 1 MiB each.

It prints, per attack: the client's p99 step latency during the attack over its unloaded
p99 (target at most 3x), the server's RSS before, at its highest during, and 1 s after the
attack (targets: at most +64 MiB during, back within 10% after), and how many connections
the server cut off. Then 1,000 idle TCP connections (each sends the preface and SETTINGS,
then nothing) and a real client that must complete an episode. RSS comes from
``/proc/PID/status`` (Linux). The machine's noise shows in the absolute numbers: read the
ratios.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import resource
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # the attacker's frames come from the tests' hostile client

from trio_rlmesh import Error  # noqa: E402

ATTACKS = ("rapid-reset", "ping-flood", "continuation-flood")
IDLE_CONNECTIONS = 1000
EMPTY_SETTINGS = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"


# ----------------------------------------------------------------------------- attacker


def attack(kind: str, address: str) -> None:
    """Flood ``address`` with ``kind`` until SIGTERM, reconnecting whenever cut off. Prints
    ``ready`` once the first connection is up, and at the end one JSON line: connections
    opened and bytes written."""
    import signal

    import trio
    import trio.testing
    from tests.transports.grpc.hostile import Hostile, hostile

    from trio_rlmesh.transports.grpc._handshake import ENV_HANDSHAKE

    host, port = address.rsplit(":", 1)
    stats = {"connections": 0, "bytes": 0}
    # Built once: a new connection starts a new HPACK context and new stream ids, so the
    # same bytes serve every connection and the attacker spends its time sending.
    template = Hostile(trio.testing.memory_stream_pair()[0])
    hello = template.hello()
    if kind == "rapid-reset":
        payload = template.rapid_reset(5000, ENV_HANDSHAKE)
    elif kind == "ping-flood":
        payload = template.pings(10_000)
    else:
        payload = template.continuation_flood(ENV_HANDSHAKE, 1024 * 1024, 63)

    async def one_connection() -> None:
        stream = await trio.open_tcp_stream(host, int(port))
        stats["connections"] += 1
        if stats["connections"] == 1:
            print("ready", flush=True)
        async with hostile(stream, hello=False) as client:
            sent = await client.send(hello + payload)
            while sent:
                stats["bytes"] += len(payload)
                if kind != "ping-flood":
                    # Everything is out: wait (briefly) for the cut, then start over.
                    with trio.move_on_after(0.2):
                        await client.closed.wait()
                    return
                sent = await client.send(payload)

    async def main() -> None:
        async with trio.open_nursery() as nursery:

            async def stop_on_sigterm() -> None:
                with trio.open_signal_receiver(signal.SIGTERM) as signals:
                    async for _ in signals:
                        nursery.cancel_scope.cancel()

            nursery.start_soon(stop_on_sigterm)
            while True:
                with contextlib.suppress(OSError):
                    await one_connection()
                await trio.lowlevel.checkpoint()

    trio.run(main)
    print(json.dumps(stats), flush=True)


# ----------------------------------------------------------------------------- measuring


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for {pid}")


class RssSampler:
    """The highest RSS of ``pid`` while the block runs (sampled every 20 ms)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak = rss_mib(pid)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            with contextlib.suppress(OSError, RuntimeError):
                self.peak = max(self.peak, rss_mib(self.pid))

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def p99(samples: list[float]) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]


async def _step_for(address: str, backend: str, seconds: float) -> list[float]:
    """Step ``address`` for ``seconds`` with our client; every step's latency in ms.

    Raises:
        trio_rlmesh.Error: the client failed (could not connect, lost the connection).
    """
    import trio

    from trio_rlmesh.protocol import env_v1, spaces_v1
    from trio_rlmesh.transports.grpc import open_env_client

    latencies: list[float] = []
    actions = [spaces_v1.SpaceValue(leaves=[bytes([a]) + bytes(7)]) for a in (0, 1)]
    async with open_env_client(address, backend=backend) as env:  # type: ignore[arg-type]
        await env.reset(env_v1.ResetRequest(seeds=[0]))
        deadline = trio.current_time() + seconds
        n = 0
        while trio.current_time() < deadline:
            started = time.perf_counter()
            stepped = await env.step(env_v1.StepRequest(action=actions[n % 2]))
            latencies.append((time.perf_counter() - started) * 1000)
            n += 1
            if any(stepped.response.terminated_mask) or any(stepped.response.truncated_mask):
                await env.reset(env_v1.ResetRequest(seeds=[n]))
    return latencies


def measure_steps(address: str, backend: str, seconds: float) -> tuple[list[float], str | None]:
    """Step latencies over ``seconds``, and how the client failed if it did."""
    import trio

    try:
        return trio.run(_step_for, address, backend, seconds), None
    except Error as exc:
        return [math.inf], f"{type(exc).__name__}: {exc}"


# ----------------------------------------------------------------------------- the server


@contextlib.contextmanager
def server(backend: str, src: Path) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """``serve-env`` of CartPole, from the package in ``src``."""
    with tempfile.TemporaryDirectory() as tmp:
        ready = Path(tmp) / "address"
        log = Path(tmp) / "stderr"
        env = {**os.environ, "PYTHONPATH": str(src)}
        with log.open("wb") as stderr:
            process = subprocess.Popen(
                [
                    sys.executable,
                    *("-m", "trio_rlmesh", "serve-env", "gymnasium:CartPole-v1"),
                    *("--grpc-backend", backend, "--ready-file", str(ready)),
                ],
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                env=env,
            )
        try:
            deadline = time.monotonic() + 60
            while not ready.exists():
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the server did not start: {log.read_text()}")
                time.sleep(0.05)
            yield process, ready.read_text().strip()
        finally:
            process.terminate()
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@contextlib.contextmanager
def attacking(kind: str, address: str) -> Iterator[dict[str, int]]:
    """An attacker subprocess for the block (once it is connected); its totals after."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    attacker = subprocess.Popen(
        [sys.executable, __file__, "--attack", kind, "--address", address],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    stats: dict[str, int] = {}
    try:
        assert attacker.stdout is not None
        if attacker.stdout.readline().strip() != "ready":
            raise RuntimeError(f"the {kind} attacker did not start")
        yield stats
    finally:
        attacker.terminate()
        out, _ = attacker.communicate(timeout=60)
        lines = out.strip().splitlines()
        stats.update(json.loads(lines[-1]) if lines else {})


def probe_attack(kind: str, backend: str, seconds: float, src: Path) -> dict[str, Any]:
    """One attack on a fresh server: the client's latencies before and during, the RSS."""
    with server(backend, src) as (process, address):
        measure_steps(address, backend, 1.0)  # warm-up
        unloaded, before_failure = measure_steps(address, backend, seconds)
        before = rss_mib(process.pid)
        with RssSampler(process.pid) as sampler, attacking(kind, address) as stats:
            loaded, failure = measure_steps(address, backend, seconds)
        time.sleep(1.0)
        after = rss_mib(process.pid)
    return {
        "backend": backend,
        "attack": kind,
        "unloaded_p99_ms": p99(unloaded),
        "loaded_p99_ms": p99(loaded),
        "p99_ratio": p99(loaded) / p99(unloaded),
        "steps_during": len(loaded),
        "rss_before_mib": before,
        "rss_peak_mib": sampler.peak,
        "rss_after_mib": after,
        "attacker_connections": stats.get("connections", 0),
        "attacker_mib_sent": stats.get("bytes", 0) / 2**20,
        "client_failure": failure,
        "unloaded_failure": before_failure,
    }


def probe_idle_connections(backend: str, src: Path) -> dict[str, Any]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = IDLE_CONNECTIONS + 256
    if soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(wanted, hard), hard))
    with server(backend, src) as (process, address):
        host, port = address.rsplit(":", 1)
        sockets: list[socket.socket] = []
        try:
            for n in range(IDLE_CONNECTIONS):
                sock = socket.create_connection((host, int(port)), timeout=10)
                if n % 2 == 0:
                    sock.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + EMPTY_SETTINGS)
                sockets.append(sock)
            started = time.perf_counter()
            failure = None
            try:
                episode = measure_episode(address, backend)
            except Error as exc:
                episode, failure = 0, f"{type(exc).__name__}: {exc}"
            took = time.perf_counter() - started
            closed = sum(_closed(sock) for sock in sockets)
        finally:
            for sock in sockets:
                sock.close()
        return {
            "backend": backend,
            "idle_connections": IDLE_CONNECTIONS,
            "episode_steps": episode,
            "episode_s": took,
            "idle_closed_by_server": closed,
            "client_failure": failure,
            "server_rss_mib": rss_mib(process.pid),
        }


def _closed(sock: socket.socket) -> bool:
    sock.setblocking(False)
    try:
        while True:
            if not sock.recv(65536):
                return True
    except BlockingIOError:
        return False
    except OSError:
        return True


def measure_episode(address: str, backend: str) -> int:
    import trio

    from trio_rlmesh.protocol import env_v1, spaces_v1
    from trio_rlmesh.transports.grpc import open_env_client

    async def main() -> int:
        with trio.fail_after(120):
            async with open_env_client(address, backend=backend, connect_timeout=60) as env:  # type: ignore[arg-type]
                await env.reset(env_v1.ResetRequest(seeds=[0]))
                for steps in range(1, 1000):
                    action = spaces_v1.SpaceValue(leaves=[bytes([steps % 2]) + bytes(7)])
                    stepped = await env.step(env_v1.StepRequest(action=action))
                    if any(stepped.response.terminated_mask) or any(
                        stepped.response.truncated_mask
                    ):
                        return steps
        raise RuntimeError("the episode did not end")

    return trio.run(main)


# ----------------------------------------------------------------------------- report


def report(rows: list[dict[str, Any]], idle: list[dict[str, Any]]) -> str:
    lines = [
        "attack               backend  p99 ms (idle -> attacked)  ratio  target  "
        "RSS MiB before/peak/after  during  after   attacker conns",
    ]
    for row in rows:
        ratio_ok = "ok" if row["p99_ratio"] <= 3.0 else "MISSED"
        growth = row["rss_peak_mib"] - row["rss_before_mib"]
        back = row["rss_after_mib"] / row["rss_before_mib"] - 1
        lines.append(
            f"{row['attack']:<20} {row['backend']:<8} "
            f"{row['unloaded_p99_ms']:>8.2f} -> {row['loaded_p99_ms']:>8.2f}      "
            f"{row['p99_ratio']:>5.2f}  {ratio_ok:<6}  "
            f"{row['rss_before_mib']:>6.1f} / {row['rss_peak_mib']:>6.1f} / "
            f"{row['rss_after_mib']:>6.1f}   {growth:+6.1f}  {back:+6.1%}  "
            f"{row['attacker_connections']:>6}"
        )
        if row["unloaded_failure"]:
            lines.append(f"    before it, with no attack: {row['unloaded_failure']}")
        if row["client_failure"]:
            lines.append(f"    the well-behaved client failed: {row['client_failure']}")
    lines.append("")
    for item in idle:
        if item["client_failure"]:
            lines.append(
                f"{item['idle_connections']} idle TCP connections ({item['backend']}): the real "
                f"client failed: {item['client_failure']}"
            )
            continue
        lines.append(
            f"{item['idle_connections']} idle TCP connections ({item['backend']}): a real client "
            f"completed a {item['episode_steps']}-step episode in {item['episode_s']:.2f} s; "
            f"the server closed {item['idle_closed_by_server']} idle connections "
            f"(max_connections 512); server RSS {item['server_rss_mib']:.1f} MiB"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 s per attack instead of 5")
    parser.add_argument("--backend", choices=("trio", "grpclib", "both"), default="both")
    parser.add_argument("--json", type=Path, default=None, help="also write every number here")
    parser.add_argument(
        "--server-src",
        type=Path,
        default=ROOT / "src",
        help="run the server from this src/ (another checkout's, to compare before and after)",
    )
    parser.add_argument("--attack", choices=ATTACKS, help=argparse.SUPPRESS)
    parser.add_argument("--address", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.attack:
        attack(args.attack, args.address)
        return 0
    seconds = 2.0 if args.quick or os.environ.get("BENCH_QUICK") else 5.0
    backends = ("trio", "grpclib") if args.backend == "both" else (args.backend,)
    src = args.server_src.resolve()
    rows = [probe_attack(kind, backend, seconds, src) for backend in backends for kind in ATTACKS]
    idle = [probe_idle_connections(backend, src) for backend in backends]
    print(report(rows, idle))
    if args.json is not None:
        args.json.write_text(json.dumps({"attacks": rows, "idle": idle}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
