"""SIGTERM and SIGINT, from a process's first moment: recorded, then acted on where it is safe.

The command line installs `REQUESTS` as its first statement, before TensorFlow's import (which
would swallow a Ctrl-C) and the seconds that building an agent takes: a signal during start-up
stops the run before it writes anything; once the runner trains, it stops after the current
step with a checkpoint; once the run is over, it is ignored (the run is done: exit 0). From
Python (`experiments.train`) the handlers are installed around a run only, and only on the main
thread (a sweep's worker thread keeps the default behaviour).
"""

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any

from experiments.errors import RunStopped

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class StopRequests:
    """The first stop signal a process received, and the runner (if any) it stops."""

    def __init__(self):
        self.signal_name: str | None = None
        self._installed = False
        self._runner: Any = None

    def install(self) -> None:
        """Records stop signals from now on, for the process's one run; once that run is over
        (`stopping` ends), they are ignored: a finished run has nothing left to stop and exits
        0, also while Python shuts down, when no Python handler runs any more."""
        for number in STOP_SIGNALS:
            signal.signal(number, self._request)
        self._installed = True

    def _request(self, signum: int, frame: Any) -> None:
        del frame
        from absl import logging

        if self.signal_name is not None:
            return  # a second signal waits for the first stop (its checkpoint) to finish
        self.signal_name = signal.Signals(signum).name
        if self._runner is None:
            logging.warning(
                "%s received during start-up: stopping before training.", self.signal_name
            )
        else:
            self._runner.stop_requested = self.signal_name
            logging.warning(
                "%s received: stopping after the current step, with a checkpoint.",
                self.signal_name,
            )

    def check_start_up(self) -> None:
        """Stops a run that was signalled before it wrote anything (RunStopped)."""
        if self.signal_name is not None:
            number = signal.Signals[self.signal_name].value
            raise RunStopped(
                f"stopped by {self.signal_name} during start-up, before training began; "
                "nothing was written.",
                128 + number,
            )

    @contextlib.contextmanager
    def stopping(self, runner: Any) -> Iterator[None]:
        """A stop signal, received now or before, stops `runner` after its current step.
        Installs the handlers for the block where the command line has not."""
        installs = not self._installed and threading.current_thread() is threading.main_thread()
        previous = {n: signal.signal(n, self._request) for n in STOP_SIGNALS} if installs else {}
        self._runner = runner
        if self.signal_name is not None:
            runner.stop_requested = self.signal_name
        try:
            yield
        finally:
            self._runner = None
            for number, handler in previous.items():
                signal.signal(number, handler)
            if installs:  # the next run in this process starts unsignalled
                self.signal_name = None
            elif self._installed:  # the command line's run is over
                for number in STOP_SIGNALS:
                    signal.signal(number, signal.SIG_IGN)


REQUESTS = StopRequests()
