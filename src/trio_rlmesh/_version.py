"""The package version, in one place (imported by the package root and the transports)."""

from __future__ import annotations

__all__ = ["__version__"]

__version__ = "0.1.0.dev0"
