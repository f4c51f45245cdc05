"""Locking: hash-pinned lockfiles per layer (lane, SGLang, toolkit), their state, and drift rules.

Second step of the flow: it reads cells (matrix) and writes lockfiles/; builds read the locks.
"""

from .locking import check, lock_cells
from .state import LockPaths, LockStatus, paths_for, status_of

__all__ = ["LockPaths", "LockStatus", "check", "lock_cells", "paths_for", "status_of"]
