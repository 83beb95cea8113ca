"""Sphinx configuration: MyST Markdown pages plus API reference from docstrings."""

from __future__ import annotations

import trio_rlmesh

project = "trio-rlmesh"
author = "trio-rlmesh developers"
release = trio_rlmesh.__version__
version = release

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.doctest",
]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3
exclude_patterns = ["_build"]
html_theme = "furo"
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"members": True, "show-inheritance": True}
napoleon_google_docstring = True
nitpicky = False
