"""The writer: Minari's own storage writer, and one MP4 per episode (thread side).

Every method of :class:`DatasetWriter` runs on a worker thread, one call at a time,
never on the event loop. Each batch is written under :attr:`DatasetWriter.lock`;
:func:`freeze_writers` takes the locks of every writer in the process for good, so a
process that must end at once (the CLI's last resort after a signal) never stops in the
middle of a write: what is on disk is then the episodes of the batches written so far.

Minari writes an episode's arrays first and the dataset's ``metadata.json`` (with its
episode count) after, and readers read only the episodes the metadata counts. A video is
written to a ``NAME.part.mp4`` file and renamed when complete.

A recording that ends before any episode was written (it failed at the first render, or
was cancelled before an episode counted) has nothing worth keeping: :meth:`DatasetWriter.discard`
removes the directories and files it made, so the same command can run again.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
import weakref
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import numpy as np

from .._errors import RecordingError
from .._version import __version__
from ..runtime import SessionStarted
from ..spaces import Space, to_gymnasium
from ._buffers import Finished
from ._convert import Converted, convert
from ._options import (
    RecordOptions,
    check_available,
    require_video,
)

__all__ = ["DatasetWriter", "freeze_writers"]

DEFAULT_FPS = 30
META = "trio_rlmesh"
"""Prefix of the dataset's (and episodes') own metadata keys."""

_WRITERS: weakref.WeakSet[DatasetWriter] = weakref.WeakSet()


def freeze_writers(timeout: float) -> bool:
    """Wait (up to ``timeout`` s in all) for every writer's write in progress, then keep
    each from starting another. For a process about to end; returns whether all froze."""
    deadline = _monotonic() + timeout
    frozen = True
    for writer in list(_WRITERS):
        frozen &= writer.lock.acquire(timeout=max(0.0, deadline - _monotonic()))
    return frozen


def _monotonic() -> float:
    import time

    return time.monotonic()


class DatasetWriter:
    """Writes counted episodes into a Minari dataset and/or one video each."""

    def __init__(self, options: RecordOptions, metadata: Mapping[str, Any]) -> None:
        self.options = options
        self.metadata = dict(metadata)
        self.lock = threading.Lock()
        check_available(options)
        self.dataset_id = None if options.dataset is None else options.dataset.name
        self.storage: Any = None
        self.spaces: tuple[Space, Space] | None = None
        self.gym_spaces: tuple[Any, Any] = (None, None)
        self.fps = options.fps or DEFAULT_FPS
        self.written = 0
        """Episodes written (the dataset's count, and the next video's number)."""
        self.sessions: list[dict[str, str]] = []
        self.kept = False
        """Whether anything worth keeping was written (an episode, or a video)."""
        self._made: list[_Made] = []
        _WRITERS.add(self)

    @property
    def data_path(self) -> Path | None:
        """Where Minari keeps the data (``dataset/data``), absolute (Minari's HDF5 backend
        resolves a relative one against itself)."""
        return None if self.options.dataset is None else self.options.dataset.absolute() / "data"

    # ------------------------------------------------------------------ sessions

    def start_session(self, event: SessionStarted) -> None:
        """A session began: create the dataset (first session) or check it fits."""
        with self.lock:
            contract = event.contract
            if contract is None:
                raise RecordingError(
                    f"recording session {event.session_id}: its env contract did not decode"
                )
            spaces = (contract.observation_space, contract.action_space)
            if self.spaces is None:
                self.spaces = spaces
                self.gym_spaces = (to_gymnasium(spaces[0]), to_gymnasium(spaces[1]))
                fps = contract.metadata.get("render_fps")
                if self.options.fps is None and isinstance(fps, (int, float)) and fps > 0:
                    self.fps = int(fps)
                self._create(contract.env_id)
            elif spaces != self.spaces:
                raise RecordingError(
                    f"recording session {event.session_id}: env {contract.env_id!r} has "
                    f"other spaces than the episodes recorded so far ({spaces[0]} / "
                    f"{spaces[1]} vs {self.spaces[0]} / {self.spaces[1]}); one dataset "
                    "holds one pair of spaces"
                )
            self.sessions.append(
                {"session_id": event.session_id, "endpoint": event.env_id, "env": contract.env_id}
            )
            if self.storage is not None:
                self.storage.update_metadata({f"{META}.sessions": self.sessions})

    def _create(self, env_name: str) -> None:
        video = self.options.video
        if video is not None:
            self._made.append(_Made.mkdir(video))
        path = self.data_path
        if path is None:
            return
        from minari import __version__ as minari_version
        from minari.dataset.minari_storage import MinariStorage

        self._made.append(_Made.mkdir(path))
        eval_spec = self.options.eval_env_spec
        env_spec = _spec_json(self.options.env_spec)
        eval_env_spec = env_spec if eval_spec is None else _spec_json(eval_spec)
        try:
            self.storage = MinariStorage.new(
                path,
                observation_space=self.gym_spaces[0],
                action_space=self.gym_spaces[1],
                # Minari writes the spec it is given (as JSON); given only one that
                # Gymnasium can write, it never warns that the env cannot be recovered.
                env_spec=self.options.env_spec if env_spec is not None else None,
                data_format=self.options.data_format,
                jpeg_encoding=False,  # lossless: the dataset holds what the env sent
            )
        except (ValueError, TypeError, NotImplementedError) as exc:
            raise RecordingError(f"recording dataset {path}: Minari refused it: {exc}") from exc
        if eval_env_spec is not None:
            self.storage.update_metadata({"eval_env_spec": eval_env_spec})
        empty = getattr(self.storage, "_file_path", None)
        if self.options.data_format == "hdf5" and empty is not None:
            # Minari creates an empty (0-byte) file, which no reader opens: make it an HDF5
            # file with no episodes, so the dataset opens from the start (a reader during
            # the run, before its first episode is written).
            import h5py

            h5py.File(empty, "w", track_order=True).close()
        model = str(self.metadata.get("model", ""))
        self.storage.update_metadata(
            {
                "dataset_id": self.dataset_id,
                "minari_version": minari_version,
                "algorithm_name": model,
                "description": f"{env_name} evaluated with {model or 'a model'}, "
                f"recorded by trio-rlmesh {__version__}",
                f"{META}.version": __version__,
                f"{META}.env_id": env_name,
                **{f"{META}.{key}": value for key, value in self.metadata.items()},
            }
        )

    # ------------------------------------------------------------------ episodes

    def write(self, batch: Sequence[Finished]) -> int:
        """Write counted episodes, in order; returns the dataset's episode count."""
        with self.lock:
            assert self.spaces is not None, "an episode came before its session"
            converted = [convert(finished, self.spaces, self.gym_spaces) for finished in batch]
            first = self.written
            if self.storage is not None:
                self._write_dataset(converted, first)
            if self.options.video is not None:
                for offset, episode in enumerate(converted):
                    self._write_video(episode, first + offset)
            self.written += len(converted)
            return self.written

    def _write_dataset(self, episodes: Sequence[Converted], first: int) -> None:
        from minari.data_collector.episode_buffer import EpisodeBuffer

        buffers = [
            EpisodeBuffer(
                id=first + offset,
                seed=episode.record.seed,
                observations=episode.observations,
                actions=episode.actions,
                rewards=episode.rewards,
                terminations=episode.terminations,
                truncations=episode.truncations,
                infos=episode.infos,
            )
            for offset, episode in enumerate(episodes)
        ]
        storage = self.storage
        try:
            storage.update_episodes(buffers)
            storage.update_episode_metadata(
                [
                    _episode_metadata(episode, batch)
                    for episode, batch in zip(episodes, buffers, strict=True)
                ],
                [first + offset for offset in range(len(episodes))],
            )
            self.kept = True
        except Exception as exc:
            raise RecordingError(
                f"recording dataset {self.data_path}: writing episodes {first}.."
                f"{first + len(episodes) - 1} failed: {type(exc).__name__}: {exc}"
            ) from exc

    def _write_video(self, episode: Converted, number: int) -> None:
        assert self.options.video is not None
        if not episode.frames:
            raise RecordingError(
                f"recording video of episode {number}: the run rendered no frames for it"
            )
        iio = require_video("recording videos")
        target = self.options.video / f"episode-{number:06d}.mp4"
        # ffmpeg picks the container by the extension: the partial file keeps ``.mp4``.
        part = target.with_name(f"{target.stem}.part.mp4")
        try:
            frames = np.stack([_even(np.asarray(iio.imread(png))) for png in episode.frames])
            iio.imwrite(
                part,
                frames,
                extension=".mp4",
                plugin="FFMPEG",
                fps=self.fps,
                codec="libx264",
                macro_block_size=2,
                ffmpeg_log_level="error",
            )
            os.replace(part, target)
            self.kept = True
        except Exception as exc:
            with contextlib.suppress(OSError):
                part.unlink()
            raise RecordingError(f"recording video {target}: {type(exc).__name__}: {exc}") from exc

    # ------------------------------------------------------------------ the end

    def discard(self) -> bool:
        """Remove what this writer made, if it wrote nothing worth keeping; returns whether
        it did. A writer frozen for a process about to end is left as it is."""
        if self.kept or not self.lock.acquire(blocking=False):
            return False
        try:
            for made in reversed(self._made):
                made.undo()
            self._made.clear()
            return True
        finally:
            self.lock.release()


@attrs.frozen
class _Made:
    """A directory a writer needed, and how to leave the disk as it was found: remove the
    topmost directory it created, or the entries it added to one that was there."""

    path: Path
    created: bool
    before: frozenset[str] = frozenset()

    @classmethod
    def mkdir(cls, path: Path) -> _Made:
        """``mkdir -p path``, remembering what it made."""
        missing = None
        for candidate in (path, *path.parents):
            if candidate.exists():
                break
            missing = candidate
        if missing is None:
            return cls(path, created=False, before=frozenset(os.listdir(path)))
        path.mkdir(parents=True, exist_ok=True)
        return cls(missing, created=True)

    def undo(self) -> None:
        if self.created:
            shutil.rmtree(self.path, ignore_errors=True)
            return
        with contextlib.suppress(OSError):
            for name in set(os.listdir(self.path)) - self.before:
                entry = self.path / name
                if entry.is_dir() and not entry.is_symlink():
                    shutil.rmtree(entry, ignore_errors=True)
                else:
                    entry.unlink(missing_ok=True)


def _spec_json(spec: Any) -> str | None:
    """A Gymnasium ``EnvSpec`` as Minari stores it, or ``None`` (no spec, or one Gymnasium
    cannot write: a callable among its kwargs)."""
    if spec is None:
        return None
    try:
        text: str = spec.to_json()
    except (TypeError, ValueError):
        return None
    return text


def _even(frame: Any) -> Any:
    """An RGB frame padded to even width and height (H.264's 4:2:0 needs them)."""
    if frame.ndim == 2:
        frame = np.repeat(frame[:, :, None], 3, axis=2)
    frame = frame[:, :, :3]
    height, width = frame.shape[:2]
    if height % 2 or width % 2:
        frame = np.pad(frame, ((0, height % 2), (0, width % 2), (0, 0)))
    return frame


def _episode_metadata(episode: Converted, buffer: Any) -> dict[str, Any]:
    record = episode.record
    fields = {
        "episode_id": record.episode_id,
        "index": record.index,
        "env_index": record.env_index,
        "trial": record.trial,
        "reward": record.reward,
        "terminated": record.terminated,
        "truncated": record.truncated,
        "success": record.success,
    }
    # HDF5 attributes cannot hold None: an unknown value is left out.
    return {f"{META}.{key}": value for key, value in fields.items() if value is not None}
