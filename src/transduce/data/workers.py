"""The encoding worker processes of `prepare` (parallel.py): they ignore Ctrl-C, which is the main process's to
handle, and die with their parent, even one killed with SIGKILL."""

from __future__ import annotations

import os
import signal


def start_worker(parent: int) -> None:
    """An encoding worker: Ctrl-C is the main process's to handle (a worker saves nothing), and the worker dies with
    its parent. A `prepare` killed with SIGKILL cannot stop its workers: without this they lived on as orphans,
    blocked for good, and kept multiprocessing's resource tracker alive too (issue 65 item 5)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    die_with_parent(parent)


PR_SET_PDEATHSIG = 1  # prctl(2): the signal this process gets when the thread that made it ends (Linux)


def die_with_parent(parent: int) -> None:
    """Have the kernel send this process SIGKILL when its parent (pid `parent`) ends: prctl(PR_SET_PDEATHSIG) on
    Linux; where prctl is missing, a daemon thread that watches for the parent's end. A parent gone already (before
    this ran) ends the process at once."""
    import ctypes
    import threading
    import time

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        armed = libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0
    except (OSError, AttributeError):  # not Linux
        armed = False
    if os.getppid() != parent:  # the parent ended before the signal was armed
        os._exit(1)
    if armed:
        return

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()
