"""Child processes that never outlive their parent (a sweep's runs, the asynchronous driver's
process workers): an orphan would keep training and hold its run folder's lock."""

import os
import signal
import sys


def die_with_parent(parent_pid: int, signum: int = signal.SIGTERM) -> None:
    """Asks the kernel to send `signum` to this process when its parent dies, however it dies
    (Linux); if the parent is already gone, sends it now."""
    if sys.platform.startswith("linux"):
        import ctypes

        pr_set_pdeathsig = 1
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(pr_set_pdeathsig, signum)
    if os.getppid() != parent_pid:  # the parent died before the line above took effect
        os.kill(os.getpid(), signum)
