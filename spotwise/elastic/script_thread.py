"""A user's training script run as this process's ``__main__`` in a thread of its own, and ended.

:class:`ScriptThread` runs ``path`` with ``sys.argv = [path, *args]`` and the script's folder first on
``sys.path``, as ``python train.py ARGS`` would (``runpy.run_path(path, run_name="__main__")``), and
gives back ``sys.argv`` and ``sys.path`` when the script ends.  While it runs, ``runpy`` holds the
script as the process's ``__main__`` -- which every ``multiprocessing`` spawn of the process re-runs
in its children -- so a thread must never outlive its use: :meth:`ScriptThread.end` stops one that
waits or hangs (issue 55; a probe thread left behind made later spawns run the user's script).
"""

from __future__ import annotations

import ctypes
import os
import runpy
import sys
import threading
from typing import Any, Callable

from spotwise.elastic.handover import Abandoned


class ScriptThread:
    """The thread that runs one script (module docstring).  ``body(run)`` is called in the thread and
    must call ``run()`` (which runs the script) -- the host wraps it with its own set-up and reports."""

    def __init__(self, path: str, args: list[str], body: Callable[[Callable[[], None]], None]) -> None:
        self.path = str(path)
        self.args = [str(a) for a in args]
        self._body = body
        self._thread: threading.Thread | None = None
        #: the process's ``__main__``, ``sys.argv`` and ``sys.path`` before the script ran
        self._saved: tuple[Any, list[str], list[str]] | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._main, name="spotwise-script", daemon=True)
        self._thread.start()

    @property
    def thread(self) -> threading.Thread | None:
        return self._thread

    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def join(self, timeout_s: float) -> bool:
        if self._thread is not None:
            self._thread.join(timeout=timeout_s)
        return not self.alive()

    def is_current(self) -> bool:
        return threading.current_thread() is self._thread

    def end(self, wake: Callable[[], None], timeout_s: float = 5.0) -> bool:
        """End the thread where it stands, running none of the rest of the script: ``wake()`` hands a
        script waiting at a step boundary its end (it raises :class:`Abandoned` there); one that never
        got there (a hang, a slow start) gets :class:`Abandoned` raised asynchronously.  A thread
        blocked in C that does not end within ``timeout_s`` is left, with the process's own
        ``__main__``, ``sys.argv`` and ``sys.path`` put back.  Returns whether the thread ended."""
        t = self._thread
        if t is None or not t.is_alive():
            return True
        wake()
        t.join(timeout=min(2.0, timeout_s))  # woken at a step boundary it ends at once; busy in its own code it does not
        if t.is_alive() and t.ident is not None:
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(t.ident), ctypes.py_object(Abandoned))
            t.join(timeout=timeout_s)
        if not t.is_alive():
            return True
        if self._saved is not None:
            main, argv, path = self._saved
            if main is not None:
                sys.modules["__main__"] = main
            sys.argv = argv
            sys.path[:] = path
        return False

    def _main(self) -> None:
        argv = sys.argv
        self._saved = (sys.modules.get("__main__"), list(argv), list(sys.path))
        sys.argv = [self.path, *self.args]
        folder = os.path.dirname(os.path.abspath(self.path))
        sys.path.insert(0, folder)
        try:
            self._body(lambda: runpy.run_path(self.path, run_name="__main__"))
        except Abandoned:
            pass  # raised by end() outside the script's own code: the thread ends all the same
        finally:
            sys.argv = argv
            if sys.path and sys.path[0] == folder:
                sys.path.pop(0)
