"""The recording hooks and :func:`open_recording`, which runs their writer beside the run.

The hooks only append references to the events they get (nothing is decoded on the event
loop) and, when the run counts an episode, hand it to a bounded memory channel. One
writer task takes batches off the channel and writes them on a worker thread
(``trio.to_thread``). When the writer falls behind, the channel fills and the run waits
for room: memory stays bounded and no counted episode is dropped.

The writer is shielded from cancellation and ends only when the channel is closed and
empty, so a cancelled or failed run still has every episode it counted on disk, and
never half an episode. A writer failure cancels the run and comes out of
:func:`open_recording` as :class:`~trio_rlmesh.RecordingError`.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import attrs
import trio

from .._errors import RecordingError, SpecError
from ..protocol import core_v1, read_env_contract
from ..runtime import (
    EpisodeCompleted,
    ResetCompleted,
    RuntimeHooks,
    SessionEnded,
    SessionFailed,
    SessionStarted,
    StepCompleted,
)
from ._buffers import Buffers, Finished
from ._options import RecordOptions, as_record_options
from ._writer import DatasetWriter

if sys.version_info < (3, 11):  # pragma: no cover - exercised on 3.10 only
    from exceptiongroup import BaseExceptionGroup

__all__ = ["RecordingHooks", "for_run", "open_recording"]

_BATCH = 64
"""Most episodes one thread hand-off writes."""


@attrs.frozen
class _Failed:
    """Something the hooks found wrong; the writer raises it (and so stops the run)."""

    error: RecordingError


class RecordingHooks(RuntimeHooks):
    """Hooks that record every counted episode; get them from :func:`open_recording`.

    Attributes:
        writer: where the episodes go (its ``written`` counts them once written).
    """

    def __init__(self, send: trio.MemorySendChannel[Any], writer: DatasetWriter) -> None:
        self._send = send
        self._buffers = Buffers()
        self.writer = writer
        self.handed = 0
        """Counted episodes handed to the writer."""

    @property
    def renders(self) -> bool:
        """Whether the run must render frames (videos are recorded)."""
        return self.writer.options.video is not None

    async def _hand(self, item: Any) -> None:
        # Shielded: an episode the run counted is never lost to a cancellation while it
        # waits for room; the writer (shielded too) always makes room.
        with trio.CancelScope(shield=True):
            try:
                await self._send.send(item)
            except (trio.ClosedResourceError, trio.BrokenResourceError):
                raise RecordingError(
                    "recording has stopped; the run's later episodes are not recorded"
                ) from None

    async def session_started(self, event: SessionStarted) -> None:
        await self._hand(event)

    async def reset_completed(self, event: ResetCompleted) -> None:
        self._buffers.reset(event)

    async def step_completed(self, event: StepCompleted) -> None:
        self._buffers.step(event)

    async def episode_completed(self, event: EpisodeCompleted) -> None:
        try:
            finished: Any = self._buffers.complete(event)
        except RecordingError as exc:
            finished = _Failed(exc)
        else:
            self.handed += 1
        await self._hand(finished)

    async def session_ended(self, event: SessionEnded) -> None:
        self._buffers.end_session(event.env_id)

    async def session_failed(self, event: SessionFailed) -> None:
        self._buffers.end_session(event.env_id)

    def close(self) -> None:
        """No more episodes: the writer finishes what is queued, then ends."""
        self._send.close()


async def _write(writer: DatasetWriter, receive: trio.MemoryReceiveChannel[Any]) -> None:
    with trio.CancelScope(shield=True):
        async with receive:
            async for item in receive:
                batch = [item]
                while len(batch) < _BATCH:
                    try:
                        batch.append(receive.receive_nowait())
                    except (trio.WouldBlock, trio.EndOfChannel):
                        break
                try:
                    await trio.to_thread.run_sync(_handle, writer, batch)
                except RecordingError:
                    raise
                except Exception as exc:
                    raise RecordingError(f"recording failed: {type(exc).__name__}: {exc}") from exc


def _handle(writer: DatasetWriter, batch: list[Any]) -> None:
    """Write a batch in arrival order: sessions, episodes, failures (thread side)."""
    episodes: list[Finished] = []
    for item in batch:
        if isinstance(item, Finished):
            episodes.append(item)
            continue
        if episodes:
            writer.write(episodes)
            episodes = []
        if isinstance(item, _Failed):
            raise item.error
        writer.start_session(item)
    if episodes:
        writer.write(episodes)


@asynccontextmanager
async def open_recording(
    options: RecordOptions | str | Any, *, metadata: Mapping[str, Any] | None = None
) -> AsyncIterator[RecordingHooks]:
    """Record the runs in the block: yields the hooks to pass to the run.

    ``options`` is a :class:`RecordOptions` or a dataset directory. ``metadata`` adds
    entries to the dataset's metadata (under ``trio_rlmesh.``; ``model`` also becomes
    Minari's ``algorithm_name``). The dataset's name, Minari and the backend are checked
    here, before anything runs. On exit the writer finishes every episode the runs
    counted, even when the block was cancelled or failed; a recording that wrote no
    episode removes the directories it made.

    Raises:
        SpecError: the directory is not a new ``name-v<N>`` dataset, or a package is
            missing (Minari needs Python >= 3.11; ``pip install 'trio-rlmesh[record]'``).
        trio_rlmesh.RecordingError: writing failed (the run was cancelled; the episodes written
            before stay loadable).

    Example::

        async with open_recording("runs/cartpole-eval-v0", metadata={"model": "mine"}) as rec:
            report = await run_local(model, options, hooks=rec)
    """
    record = as_record_options(options)
    assert record is not None
    writer = DatasetWriter(record, {**(metadata or {})})
    send, receive = trio.open_memory_channel[Any](record.max_pending_episodes)
    hooks = RecordingHooks(send, writer)
    raised: BaseException | None = None
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_write, writer, receive)
            try:
                yield hooks
            except BaseException as exc:
                raised = exc
                raise
            finally:
                hooks.close()
    except BaseExceptionGroup as group:
        recording = [e for e in _leaves(group) if isinstance(e, RecordingError)]
        if recording:
            # The writer failed: the run was cancelled because of it, so its error is
            # the one that explains what happened.
            raise recording[0] from None
        if raised is not None and len(group.exceptions) == 1 and group.exceptions[0] is raised:
            raise raised from raised.__cause__
        raise
    finally:
        # The writer has ended. Nothing written (the run failed at its first render, or
        # was cancelled before an episode counted): leave no empty dataset behind.
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(writer.discard)


def _leaves(exc: BaseException) -> list[BaseException]:
    inner = getattr(exc, "exceptions", None)
    if not isinstance(inner, tuple):
        return [exc]
    return [leaf for member in inner for leaf in _leaves(member)]


def for_run(
    record: RecordOptions,
    contract: core_v1.EnvContract,
    component_id: str,
    *,
    model: str,
    base_seed: int | None,
    episode_seeds: Sequence[int],
    session_id: str,
    env_spec: Any = None,
    max_episode_steps: int | None = None,
) -> AbstractAsyncContextManager[RecordingHooks]:
    """The recording one ``run_local``/``run_remote`` call drives in: its metadata names the
    model and the seeds; its Minari ``env_spec`` is ``record.env_spec``, else ``env_spec``
    (the hosted env's own), with the run's ``max_episode_steps`` when that cuts episodes
    shorter. Videos are refused here, before the run starts, for an env that does not
    render ``rgb_array`` frames."""
    if record.video is not None:
        info = read_env_contract(contract)
        if info.render_mode != "rgb_array":
            raise SpecError(
                f"recording videos needs an env that renders rgb_array frames; {info.env_id} "
                f"at {component_id} has render mode {info.render_mode!r}: make it with "
                "render_mode='rgb_array' (trio-rlmesh run: --env-kwargs "
                '\'{"render_mode": "rgb_array"}\')'
            )
    spec = record.env_spec if record.env_spec is not None else env_spec
    # Gymnasium's EnvSpec is a dataclass: the run's cap goes into a copy of it.
    is_spec = dataclasses.is_dataclass(spec) and not isinstance(spec, type)
    if is_spec and max_episode_steps is not None:
        limit = getattr(spec, "max_episode_steps", None)
        if limit is None or max_episode_steps < limit:
            spec = dataclasses.replace(spec, max_episode_steps=max_episode_steps)
    record = attrs.evolve(record, env_spec=spec)
    metadata = {
        "model": model,
        "base_seed": base_seed,
        "episode_seeds": list(episode_seeds),
        "session_id": session_id,
    }
    return open_recording(record, metadata=metadata)
