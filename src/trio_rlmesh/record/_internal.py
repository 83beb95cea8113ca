"""What the recording layer offers the layers above it (the facade, the CLI); none of it
is public API.

Users import from :mod:`trio_rlmesh.record`. The facade and the CLI import the recording
layer's internals from here and from no other private module of it (``tests/test_layering.py``
checks that).
"""

from __future__ import annotations

from ._options import as_record_options, check_available
from ._recording import for_run
from ._show import check_plot_path
from ._writer import freeze_writers

__all__ = ["as_record_options", "check_available", "check_plot_path", "for_run", "freeze_writers"]
