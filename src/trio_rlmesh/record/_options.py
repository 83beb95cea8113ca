"""What to record, and the checks that can run before anything connects."""

from __future__ import annotations

import os
import platform
import re
import sys
from pathlib import Path
from typing import Any, Literal

import attrs

from .._errors import SpecError

__all__ = [
    "MINARI_PYTHON",
    "RecordOptions",
    "as_record_options",
    "check_available",
    "check_dataset_dir",
    "require_minari",
    "require_video",
]

MINARI_PYTHON = (3, 11)
"""The oldest Python Minari supports (its ``requires-python``)."""

EXTRA = "pip install 'trio-rlmesh[record]'"

_DATASET_ID = re.compile(r"^[-_\w]+?-v\d+$")
"""A Minari dataset id without namespace: ``name-v<version>`` (Minari's own pattern)."""

DataFormat = Literal["hdf5", "arrow"]


def _path(value: Any) -> Path | None:
    return None if value is None else Path(os.fspath(value))


def _format(value: str) -> DataFormat:
    if value == "hdf5":
        return "hdf5"
    if value == "arrow":
        return "arrow"
    raise SpecError(f"record data_format must be 'hdf5' or 'arrow', got {value!r}")


def _env_spec(value: Any) -> Any:
    """A Gymnasium ``EnvSpec`` as it is, a registered id as its spec."""
    if value is None:
        return None
    if not isinstance(value, str):
        if not callable(getattr(value, "to_json", None)):
            raise SpecError(
                f"record env_spec must be a Gymnasium EnvSpec or a registered id, got "
                f"{type(value).__name__}"
            )
        return value
    try:
        import gymnasium
    except ImportError:
        raise SpecError(f"record env_spec {value!r} needs Gymnasium: {EXTRA}") from None
    try:
        return gymnasium.spec(value)
    except gymnasium.error.Error as exc:
        raise SpecError(
            f"record env_spec {value!r} is no registered Gymnasium env: {exc}"
        ) from None


def _pending(value: int) -> int:
    if int(value) < 1:
        raise SpecError(f"record max_pending_episodes must be at least 1, got {value}")
    return int(value)


@attrs.frozen
class RecordOptions:
    """What a run records: a Minari dataset, videos, or both.

    Example:
        >>> RecordOptions("runs/cartpole-eval-v0").dataset.name
        'cartpole-eval-v0'
    """

    dataset: Path | None = attrs.field(default=None, converter=_path)
    """The dataset's own directory, as Minari lays it out: its name is the dataset id
    (``name-v<N>``) and the data go to ``dataset/data``, so ``minari.load_dataset(name)``
    finds it when ``MINARI_DATASETS_PATH`` is its parent. It must not hold a dataset yet."""
    video: Path | None = attrs.field(default=None, converter=_path)
    """A directory for one MP4 per counted episode (``episode-000000.mp4``, numbered like
    the dataset's episodes); the env must render ``rgb_array`` frames."""
    model_name: str | None = None
    """The model, as the dataset's metadata names it (default: the model's address, or its
    class)."""
    data_format: DataFormat = attrs.field(default="hdf5", converter=_format)
    """Minari's storage backend: ``"hdf5"`` (needs h5py, in the ``record`` extra) or
    ``"arrow"`` (needs pyarrow)."""
    max_pending_episodes: int = attrs.field(default=16, converter=_pending)
    """Finished episodes waiting for the writer; when the disk is slower than the run,
    the run waits for room (back-pressure), so memory stays bounded."""
    fps: int | None = None
    """Video frame rate (default: the env's ``render_fps`` metadata, else 30)."""
    env_spec: Any = attrs.field(default=None, converter=_env_spec)
    """The Gymnasium env the dataset says it was recorded on (Minari's ``env_spec``), so
    that ``dataset.recover_environment()`` makes it again: an ``EnvSpec`` or a registered
    id. By default, the env's own ``spec`` when the run hosts an env made by
    ``gymnasium.make`` (and, on the command line, the ``gymnasium:<id>`` env it makes);
    none for an env server, whose env this process cannot know. A run's
    ``max_episode_steps`` below the spec's becomes the spec's."""
    eval_env_spec: Any = attrs.field(default=None, converter=_env_spec)
    """Minari's ``eval_env_spec`` (``recover_environment(eval_env=True)``); default: the
    :attr:`env_spec`."""

    def __attrs_post_init__(self) -> None:
        if self.dataset is None and self.video is None:
            raise SpecError("RecordOptions needs a dataset directory, a video directory, or both")
        if self.fps is not None and self.fps < 1:
            raise SpecError(f"record fps must be at least 1, got {self.fps}")


def as_record_options(value: Any) -> RecordOptions | None:
    """``RunLocalOptions.record``: options as they are, a path as a dataset directory."""
    if value is None or isinstance(value, RecordOptions):
        return value
    if isinstance(value, (str, os.PathLike)):
        return RecordOptions(dataset=value)
    raise SpecError(
        f"record must be a dataset directory or RecordOptions, got {type(value).__name__}"
    )


def require_minari(what: str, data_format: DataFormat = "hdf5") -> Any:
    """Import minari (and the backend's package), or say plainly why it cannot be used."""
    if sys.version_info < MINARI_PYTHON:
        raise SpecError(
            f"{what} needs Minari, which needs Python >= "
            f"{'.'.join(map(str, MINARI_PYTHON))}; this is Python {platform.python_version()}. "
            "Videos (--record-video, RecordOptions(video=...)) work on any Python."
        )
    backend = "h5py" if data_format == "hdf5" else "pyarrow"
    missing = []
    try:
        import minari
    except ImportError:
        missing.append("minari")
        minari = None
    try:
        __import__(backend)
    except ImportError:
        missing.append(backend)
    if missing:
        hint = EXTRA if backend == "h5py" else f"{EXTRA} pyarrow"
        raise SpecError(f"{what} needs {' and '.join(missing)}: {hint}")
    return minari


def require_video(what: str) -> Any:
    """Import imageio with its packaged ffmpeg, or say how to install them."""
    try:
        import imageio.v3 as iio
        import imageio_ffmpeg  # noqa: F401 - the MP4 encoder imageio uses
    except ImportError:
        raise SpecError(f"{what} needs imageio and imageio-ffmpeg: {EXTRA}") from None
    return iio


def check_available(record: RecordOptions) -> None:
    """Refuse a recording that cannot work (a bad dataset directory, a missing package),
    before a run connects to anything."""
    if record.dataset is not None:
        check_dataset_dir(record.dataset)
        require_minari("recording a Minari dataset", record.data_format)
    if record.video is not None:
        require_video("recording videos")


def check_dataset_dir(path: Path) -> str:
    """The dataset id ``path`` stands for; refuses a bad name or an existing dataset."""
    name = path.name
    if not _DATASET_ID.match(name):
        raise SpecError(
            f"recording dataset {path}: the directory's name is the Minari dataset id and "
            f"must look like name-v<N> (e.g. {_suggest(name)}), so that "
            "minari.load_dataset finds it"
        )
    metadata = path / "data" / "metadata.json"
    if metadata.exists():
        raise SpecError(
            f"recording dataset {path}: it already holds a dataset ({metadata}); "
            "choose a new directory or delete that one"
        )
    if path.exists() and not path.is_dir():
        raise SpecError(f"recording dataset {path}: it exists and is not a directory")
    return name


def _suggest(name: str) -> str:
    stem = re.sub(r"[^-_\w]", "-", name).strip("-") or "dataset"
    return f"{stem}-v0"
