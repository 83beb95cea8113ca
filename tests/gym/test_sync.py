"""trio_rlmesh.gym.RemoteEnv / RemoteVectorEnv from plain synchronous code, against serve_env.

The server runs on a background trio thread on 127.0.0.1:0; the tests are ordinary
synchronous functions, as a training script would be.
"""

from __future__ import annotations

import _thread
import gc
import os
import signal
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import gymnasium
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from gymnasium.vector import AutoresetMode

import trio_rlmesh
from trio_rlmesh.gym import ENV_ID, RemoteEnv, RemoteVectorEnv
from trio_rlmesh.transports.grpc import RemoteEnvError

from .envs import CHECK_ENV_IDS, BlockingEnv, EchoEnv, FramesEnv, assert_same, make_checked
from .support import NO_SPEC_WARNING, gymnasium_warnings, served_in_thread

pytestmark = pytest.mark.network

ROOT = Path(__file__).resolve().parents[2]


def _threads(prefix: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(prefix) and t.is_alive()]


@pytest.mark.parametrize("name", CHECK_ENV_IDS)
def test_check_env_passes_as_it_does_on_the_env_itself(name: str) -> None:
    baseline = gymnasium_warnings(
        lambda: check_env(make_checked(name).unwrapped, skip_render_check=True)
    )
    with served_in_thread(make_checked(name)) as address:
        with RemoteEnv(address) as env:
            assert isinstance(env, gymnasium.Env)
            direct = gymnasium_warnings(lambda: check_env(env))
        made = gymnasium.make(ENV_ID, address=address)
        try:
            assert made.spec is not None
            assert made.spec.id == ENV_ID
            # With a spec, check_env also compares seeded resets, steps and infos, and
            # makes (and closes) a second env from the spec.
            via_make = gymnasium_warnings(lambda: check_env(made.unwrapped))
        finally:
            made.close()
    assert direct[:-1] == baseline
    assert NO_SPEC_WARNING in direct[-1]
    assert via_make == baseline


@pytest.mark.parametrize("name", CHECK_ENV_IDS)
def test_rollouts_equal_direct_gymnasium(name: str) -> None:
    direct = make_checked(name)
    with served_in_thread(make_checked(name)) as address, RemoteEnv(address) as env:
        assert env.observation_space == direct.observation_space
        assert env.action_space == direct.action_space
        for seed in (0, 1):
            env.action_space.seed(seed)
            obs, info = env.reset(seed=seed)
            expected, expected_info = direct.reset(seed=seed)
            assert_same(obs, expected)
            assert info == expected_info
            for _ in range(300):
                action = env.action_space.sample()
                obs, reward, terminated, truncated, info = env.step(action)
                want = direct.step(action)
                assert_same(obs, want[0])
                assert (reward, terminated, truncated) == (float(want[1]), want[2], want[3])
                if terminated or truncated:
                    break


def test_the_grpclib_backend_and_a_token_pass_through() -> None:
    with served_in_thread(gymnasium.make("CartPole-v1"), token="s3cret") as address:
        with pytest.raises(trio_rlmesh.TransportError, match="token"):
            RemoteEnv(address, backend="grpclib").reset()
        with RemoteEnv(address, backend="grpclib", token="s3cret") as env:
            direct = gymnasium.make("CartPole-v1")
            assert_same(env.reset(seed=4)[0], direct.reset(seed=4)[0])
            assert_same(env.step(1)[0], direct.step(1)[0])


def test_reset_seeds_np_random_like_gymnasium() -> None:
    with served_in_thread(gymnasium.make("CartPole-v1")) as address, RemoteEnv(address) as env:
        env.reset(seed=123)
        first = env.np_random.bit_generator.state
        env.reset()
        assert env.np_random.bit_generator.state == first  # an unseeded reset keeps it
        env.reset(seed=123)
        assert env.np_random.bit_generator.state == first
        assert env.np_random_seed == 123


def test_render_and_render_mode() -> None:
    with served_in_thread(FramesEnv()) as address:
        with RemoteEnv(address, render_mode="rgb_array") as env:
            assert env.render_mode == "rgb_array"
            env.reset(seed=0)
            env.step(1)
            direct = FramesEnv()
            direct.reset(seed=0)
            direct.step(1)
            np.testing.assert_array_equal(env.render(), direct.render())
        with pytest.raises(trio_rlmesh.SpecError, match="renders in 'rgb_array'"):
            RemoteEnv(address, render_mode="human")


def test_errors_cross_to_the_calling_thread() -> None:
    with served_in_thread(EchoEnv()) as address, RemoteEnv(address) as env:
        env.reset(seed=0)
        with pytest.raises(RemoteEnvError, match="action 2 breaks the echo env") as caught:
            env.step(2)
        assert caught.value.operation == "env.step"


def test_an_unreachable_server_fails_the_constructor_and_leaves_no_thread() -> None:
    with served_in_thread(EchoEnv()) as address:
        pass  # the port is free again
    before = _threads("trio-rlmesh RemoteEnv")
    with pytest.raises(trio_rlmesh.TransportError):
        RemoteEnv(address, connect_timeout=10)
    assert _threads("trio-rlmesh RemoteEnv") == before


def test_close_ends_the_thread_and_is_idempotent() -> None:
    with served_in_thread(EchoEnv()) as address:
        with RemoteEnv(address) as env:
            env.reset()
            thread = env._runner.thread
            assert thread.is_alive()
        assert not thread.is_alive()
        assert env.closed
        env.close()
        with pytest.raises(trio_rlmesh.TransportError, match="closed"):
            env.step(0)
        # the session was closed, so the server takes the next client at once
        with RemoteEnv(address) as again:
            obs, _ = again.reset(seed=6)
            assert obs.tolist() == [6.0, 0.0]


def test_an_env_dropped_without_close_is_closed_by_its_finalizer() -> None:
    with served_in_thread(EchoEnv()) as address:
        env = RemoteEnv(address)
        env.reset()
        thread = env._runner.thread
        assert env._finalizer.atexit  # also runs at interpreter exit
        del env
        gc.collect()
        assert not thread.is_alive()


def test_an_env_left_open_at_exit_does_not_hang_the_interpreter() -> None:
    script = textwrap.dedent(
        """
        import sys
        from trio_rlmesh.gym import RemoteEnv

        env = RemoteEnv(sys.argv[1])
        env.reset(seed=1)
        env.step(1)
        print("leaving", flush=True)
        """
    )
    with served_in_thread(EchoEnv()) as address:
        proc = subprocess.run(
            [sys.executable, "-c", script, address],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
        )
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout == "leaving\n"
        assert proc.stderr == ""
        with RemoteEnv(address) as env:  # the session ended; the slot is free
            env.reset()


def _send_sigint() -> None:
    signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)


def _trip_sigint() -> None:
    # Trips SIGINT's handler without a signal: no blocking wait is interrupted. That is
    # what a real Ctrl-C looks like when it lands just before the caller starts waiting.
    _thread.interrupt_main(signal.SIGINT)


@pytest.fixture
def python_sigint_handler() -> Iterator[None]:
    """Python's own SIGINT handler for the test, as in an interactive program.

    A process started in the background by a shell inherits SIGINT ignored, and Python
    then leaves it ignored: there, Ctrl-C would raise nothing to test.
    """
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.mark.usefixtures("python_sigint_handler")
@pytest.mark.parametrize("interrupt", [_send_sigint, _trip_sigint], ids=["signal", "tripped"])
def test_ctrl_c_during_a_step_cancels_it_and_the_env_stays_usable(
    interrupt: Callable[[], None],
) -> None:
    env_code = BlockingEnv()
    with served_in_thread(env_code) as address, RemoteEnv(address) as env:
        env.reset(seed=0)
        env_code.hold()

        def interrupt_once_entered() -> None:
            env_code.entered.wait(30)
            interrupt()

        interrupter = threading.Thread(target=interrupt_once_entered)
        interrupter.start()
        try:
            with pytest.raises(KeyboardInterrupt):
                env.step(0)
        finally:
            interrupter.join()
            env_code.release()
        obs, _ = env.reset(seed=1)
        assert obs.tolist() == [0.0]
        # The step was cancelled, not waited for: its late reply was dropped as stale.
        assert env._runner.resource._client.statistics().stale_replies == 1
        obs, *_ = env.step(1)
        assert obs.tolist() == [1.0]


@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_a_forked_child_gets_an_error_not_a_hang() -> None:
    with served_in_thread(EchoEnv()) as address, RemoteEnv(address) as env:
        env.reset(seed=0)
        pid = os.fork()
        if pid == 0:  # the child: the env's thread did not come along
            signal.alarm(30)  # a hang ends the child (SIGALRM), and the test fails
            code = 3
            try:
                env.step(0)
            except trio_rlmesh.TransportError as exc:
                code = 0 if "create it in this process" in str(exc) else 2
            except BaseException:
                code = 1
            env.close()  # leaves the parent's session alone
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        obs, *_ = env.step(1)  # the parent's env is untouched
        assert obs.tolist() == [1.0, 1.0]


def _python(code: str, *args: str) -> list[str]:
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


def test_importing_trio_rlmesh_gym_registers_without_any_event_loop() -> None:
    out = _python(
        """
        import sys
        import trio_rlmesh
        print(sorted(m for m in ("gymnasium", "trio_rlmesh.gym") if m in sys.modules))
        import gymnasium
        import trio_rlmesh.gym
        spec = gymnasium.spec("trio_rlmesh/Remote-v0")
        print(spec.entry_point, spec.vector_entry_point)
        print(sorted(m for m in ("asyncio", "grpclib", "h2") if m in sys.modules))
        """
    )
    assert out == [
        "[]",
        "trio_rlmesh.gym._sync:RemoteEnv trio_rlmesh.gym._sync:RemoteVectorEnv",
        "[]",
    ]


def test_gymnasium_make_imports_the_module_from_the_id_prefix() -> None:
    with served_in_thread(EchoEnv()) as address:
        out = _python(
            """
            import sys
            import gymnasium

            env = gymnasium.make("trio_rlmesh.gym:trio_rlmesh/Remote-v0", address=sys.argv[1])
            obs, info = env.reset(seed=3)
            print(type(env.unwrapped).__name__, obs.tolist(), info["seed"])
            env.close()
            """,
            address,
        )
    assert out == ["RemoteEnv [3.0, 0.0] 3"]


# ------------------------------------------------------------------------------ vector


def make_vector(n: int) -> Any:
    return gymnasium.vector.SyncVectorEnv(
        [lambda: gymnasium.make("CartPole-v1") for _ in range(n)],
        autoreset_mode=AutoresetMode.NEXT_STEP,
    )


def test_remote_vector_env_is_a_gymnasium_vector_env() -> None:
    n = 4
    with served_in_thread(make_vector(n)) as address:
        envs = gymnasium.wrappers.vector.RecordEpisodeStatistics(RemoteVectorEnv(address))
        direct = make_vector(n)
        try:
            assert isinstance(envs.unwrapped, gymnasium.vector.VectorEnv)
            assert envs.num_envs == n
            assert envs.metadata["autoreset_mode"] is AutoresetMode.NEXT_STEP
            assert envs.observation_space == direct.observation_space
            assert envs.single_action_space == direct.single_action_space
            obs, _ = envs.reset(seed=3)
            assert_same(obs, direct.reset(seed=3)[0])
            episodes = 0
            for t in range(120):
                actions = np.array([(t + k) % 2 for k in range(n)])
                obs, rewards, terminated, truncated, infos = envs.step(actions)
                want = direct.step(actions)
                assert_same(obs, want[0])
                np.testing.assert_array_equal(rewards, want[1])
                np.testing.assert_array_equal(terminated, want[2])
                np.testing.assert_array_equal(truncated, want[3])
                if "episode" in infos:  # client-side wrapper, fed by our infos and flags
                    episodes += int(infos["_episode"].sum())
            assert episodes > 0
        finally:
            envs.close()
        assert envs.unwrapped.closed


def test_remote_vector_env_closes_at_the_end_of_a_with_block() -> None:
    with served_in_thread(make_vector(2)) as address:
        with RemoteVectorEnv(address) as envs:
            envs.reset(seed=0)
            thread = envs._runner.thread
        assert envs.closed
        assert not thread.is_alive()


def test_make_vec_builds_a_remote_vector_env_with_the_served_lane_count() -> None:
    with served_in_thread(make_vector(3)) as address:
        envs = gymnasium.make_vec(ENV_ID, num_envs=3, address=address)
        try:
            assert isinstance(envs, RemoteVectorEnv)
            obs, _ = envs.reset(seed=0)
            assert obs.shape == (3, 4)
        finally:
            envs.close()
        with pytest.raises(trio_rlmesh.SpecError, match="serves 3 lanes"):
            gymnasium.make_vec(ENV_ID, num_envs=2, address=address)
