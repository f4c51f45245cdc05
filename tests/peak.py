"""How many threads were inside a stretch of code at once, at most: for the tests of what bounds that number."""

from __future__ import annotations

import threading
import time


class Peak:
    def __init__(self) -> None:
        self.now = self.most = 0
        self._lock = threading.Lock()

    def stay(self, seconds: float) -> None:
        """Be inside for `seconds`, counted."""
        with self._lock:
            self.now += 1
            self.most = max(self.most, self.now)
        time.sleep(seconds)
        with self._lock:
            self.now -= 1
