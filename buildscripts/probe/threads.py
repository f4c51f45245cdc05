"""One call in a thread of its own, its value or its exception handed back (stdlib only).

A network namespace belongs to a thread: setns(2) and unshare(CLONE_NEWNET) move the calling thread alone,
and the processes it starts stay where it is. So work that must happen in another namespace runs in a short
thread, and the rest of the process never moves. Used by the probe (the all-reduce's ranks) and the host
(joining a server's namespace, verify/netns.py).
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Dict, TypeVar

T = TypeVar("T")


def run_in_thread(work: Callable[[], T], name: str) -> T:
    """work() in a new thread; what it returned, or what it raised, raised again here."""
    box: Dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = work()
        except BaseException as exc:  # handed to the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]  # type: ignore[no-any-return]
