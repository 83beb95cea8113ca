"""Record an evaluation as a Minari dataset, load it back with Minari, and plot its returns.

Needs the record extra (``pip install -e '.[gymnasium,record]'``, Python >= 3.11).
Writes into ``--out`` (default: a new directory under the system's temporary directory,
left there to look at): the dataset ``cartpole-eval-v0/`` and ``returns.png``.
"""

import argparse
import tempfile
from pathlib import Path

import gymnasium
import minari
import numpy as np

import trio_rlmesh
from trio_rlmesh.record import plot_returns, summarize


class Policy:
    """Pushes toward the falling side, but acts at random 60% of the time (seeded), so the
    returns differ from episode to episode."""

    def __init__(self, seed=0):
        self.rng = np.random.default_rng(seed)

    def predict(self, obs):
        if self.rng.random() < 0.6:
            return np.int64(self.rng.integers(2))
        return np.int64(obs[2] + 0.3 * obs[3] > 0)


def main(out: Path) -> None:
    dataset_dir = out / "cartpole-eval-v0"  # the directory's name is the dataset id
    report = trio_rlmesh.run(
        Policy(),
        gymnasium.make("CartPole-v1"),
        episode_seeds=range(8),
        max_episodes=8,
        max_episode_steps=200,
        record=dataset_dir,
    )
    print(f"{report.status}: {len(report.episodes)} episodes, {report.total_steps} steps")

    # Minari reads it like any dataset it made: by path, or by id under its datasets root.
    dataset = minari.MinariDataset(dataset_dir / "data")
    episode = dataset[0]
    print(
        f"loaded {dataset.total_episodes} episodes; episode 0: {len(episode.actions)} actions, "
        f"observations {episode.observations.shape}, return {episode.rewards.sum():.1f}"
    )
    same = [float(e.rewards.sum()) for e in dataset.iterate_episodes()] == [
        e.reward for e in report.episodes
    ]
    print(f"dataset returns equal the report's: {same}")

    summary = summarize(dataset_dir)
    print(summary.format())
    print(f"plot written to {plot_returns(summary, out / 'returns.png')}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="where to write (default: a new temporary one)")
    args = parser.parse_args()
    # Kept, not removed at the end: the paths printed are there to be opened.
    main(args.out or Path(tempfile.mkdtemp(prefix="trio-rlmesh-record-")))
