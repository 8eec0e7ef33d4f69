"""Stop on SIGINT/SIGTERM at the end of a step (the trainer then saves and returns)."""
import signal
import threading
from typing import Any, Callable, Dict


class StopSignals:
    """While installed (``with StopSignals(on_stop):``), SIGINT and SIGTERM call
    ``on_stop`` instead of ending the process. A second signal acts as it would have
    without the handler (Ctrl-C twice quits at once). Outside the main thread, where
    Python allows no handlers, nothing is installed. The previous handlers are restored
    on exit (library use).

    on_stop: called (in the main thread, between bytecodes) on the first signal.
    """

    def __init__(self, on_stop: Callable[[], None]) -> None:
        self.on_stop = on_stop
        self.received = 0
        self._previous: Dict[int, Any] = {}

    def _handler(self, signum: int, frame: Any) -> None:
        self.received += 1
        if self.received > 1:
            signal.signal(signum, self._previous[signum])
            signal.raise_signal(signum)
        self.on_stop()

    def __enter__(self) -> "StopSignals":
        if threading.current_thread() is threading.main_thread():
            self._previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
            for sig in self._previous:
                signal.signal(sig, self._handler)
        return self

    def __exit__(self, *exc: Any) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous = {}
