"""matrix.yaml: its schema, loading with clear errors, the cells it expands to, and selecting them.

First step of the flow; it depends only on the bottom (errors, results).
"""

from .cells import Cell, Matrix, expand, select, selected
from .load import load, parse

__all__ = ["Cell", "Matrix", "expand", "load", "parse", "select", "selected"]
