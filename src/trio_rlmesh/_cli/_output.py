"""What ``run`` prints and writes: the episode table, the summary line, the JSON report."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from ..runtime import RuntimeReport

__all__ = ["empty_report_dict", "format_episodes", "write_json"]


def format_episodes(report: RuntimeReport) -> str:
    """The results table printed at the end of a run."""
    header = f"{'#':>4} {'seed':>8} {'steps':>7} {'reward':>10} {'term':>5} {'trunc':>5} {'ok':>5}"
    lines = [header, "-" * len(header)]
    for ep in report.episodes:
        seed = "-" if ep.seed is None else str(ep.seed)
        ok = "-" if ep.success is None else ("yes" if ep.success else "no")
        lines.append(
            f"{ep.index:>4} {seed:>8} {ep.steps:>7} {ep.reward:>10.2f} "
            f"{ep.terminated!s:>5} {ep.truncated!s:>5} {ok:>5}"
        )
    mean = report.mean_reward
    lines.append(
        f"{report.status}: {len(report.episodes)} episodes, {report.total_steps} steps, "
        f"mean reward {mean:.3f}" + (f" ({report.reason})" if report.reason else "")
    )
    return "\n".join(lines)


def empty_report_dict(reason: str) -> dict[str, Any]:
    """The JSON report of a run that failed before it started."""
    report = RuntimeReport("failed", reason, "", "", (), env_step_calls=0)
    return report.to_json_dict()


def write_json(path: Path | None, data: dict[str, Any]) -> None:
    """Write ``data`` as strict JSON to ``path`` (nothing when ``None``)."""
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    # Reports can carry NaN (an empty mean); keep the file strict JSON.
    text = json.dumps(data, indent=2, allow_nan=False, default=_json_default)
    path.write_text(text + "\n")


def _json_default(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    raise TypeError(f"not JSON serializable: {type(value).__name__}")
