"""Child processes that never outlive their parent (a sweep's runs, the asynchronous driver's
process workers): an orphan would keep training and hold its run folder's lock."""

import os
import pickle
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


def start_child(parent_pid: int, signum: int, payload: bytes) -> None:
    """A spawned child's first act: die with the parent (`signum`), and only then unpickle and
    call `payload`, a pickled `(function, arguments)`. Unpickling imports what they name
    (TensorFlow, the agent's modules: seconds); a child that did so before dying with its
    parent ran on for those seconds when the parent was killed meanwhile."""
    die_with_parent(parent_pid, signum)
    function, arguments = pickle.loads(payload)
    function(*arguments)
