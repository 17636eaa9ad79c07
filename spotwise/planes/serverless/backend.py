"""Where serverless workers run: Lithops (``localhost`` by default, any Lithops cloud backend by config).

:class:`LithopsBackend` invokes :func:`spotwise.planes.serverless.function.serverless_worker` as one
Lithops call per worker invocation.  The embedded default is Lithops's ``localhost`` backend:
each call is a separate Python process on this machine, started by Lithops exactly as a cloud
function would be (the function and its arguments are serialised, the result comes back through
Lithops's storage).  A real function service (IBM Cloud Functions, AWS Lambda, ...) is a Lithops
config file away (``--lithops-config``); its functions must reach the Redis (``--redis-url``) and
the dataset.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

from spotwise.errors import InputError
from spotwise.inputfiles import read_input_text
from spotwise.safeparse import load_yaml


def localhost_config(max_workers: int) -> dict[str, Any]:
    """Lithops config for the ``localhost`` backend with this interpreter and enough processes."""
    return {
        "lithops": {"backend": "localhost", "storage": "localhost", "log_level": "WARNING", "monitoring_interval": 0.1},
        "localhost": {"runtime": sys.executable, "worker_processes": max(2, int(max_workers))},
    }


def load_lithops_config(path: str | Path) -> dict[str, Any]:
    """A Lithops YAML config file; InputError (exit 2) when unreadable or not a mapping."""
    p = Path(path)
    # a regular file only, size-capped: never /dev/zero or a FIFO (issue 30 item 3)
    text = read_input_text(p, "Lithops config", "pass a Lithops YAML config file")
    data = load_yaml(text, str(p), "Lithops config", "fix its syntax (see the Lithops docs)")  # duplicate keys, nesting bombs
    if not isinstance(data, dict) or "lithops" not in data:
        raise InputError("not a Lithops config (no 'lithops:' section)", "see https://lithops-cloud.github.io/docs/source/configuration.html",
                         str(p))
    return data


class LithopsBackend:
    """Invoke worker functions through one Lithops ``FunctionExecutor``."""

    def __init__(self, config: dict[str, Any] | None = None, max_workers: int = 8) -> None:
        try:
            import lithops
        except ImportError:  # pragma: no cover - lithops is a dependency
            raise InputError("lithops is not installed", "pip install lithops (it comes with spotwise)", "lithops") from None
        logging.getLogger("lithops").setLevel(logging.ERROR)
        self.config = config or localhost_config(max_workers)
        self.name = str(self.config.get("lithops", {}).get("backend", "localhost"))
        #: the functions run on this machine as this user: they can read a 0600 file of ours, so
        #: secrets travel as a path to one and never in Lithops's job data (world-readable files
        #: under /tmp/lithops-$USER on localhost)
        self.shares_filesystem = self.name == "localhost"
        self.executor = lithops.FunctionExecutor(config=self.config)
        self.futures: list[Any] = []

    def invoke(self, args: dict[str, Any]) -> Any:
        from spotwise.planes.serverless.function import serverless_worker

        # Lithops maps a dict to keyword arguments.  On localhost the runtime is this interpreter, which
        # imports spotwise itself: nothing to pickle (include_modules=None); a cloud runtime image must
        # hold spotwise too (see the module docstring), and Lithops ships the modules the call needs.
        include = None if self.name == "localhost" else []
        fut = self.executor.call_async(serverless_worker, {"args": args}, include_modules=include)
        self.futures.append(fut)
        return fut

    def invoke_many(self, args_list: list[dict[str, Any]]) -> list[Any]:
        """Invoke several workers in one Lithops job (what a fleet start or a re-seed needs)."""
        from spotwise.planes.serverless.function import serverless_worker

        include = None if self.name == "localhost" else []
        futs = list(self.executor.map(serverless_worker, [{"args": a} for a in args_list], include_modules=include))
        self.futures.extend(futs)
        return futs

    def shutdown(self, timeout_s: float = 30.0) -> None:
        """Wait (bounded) for the calls to return, stop the executor, clean Lithops's temporary data.

        Stopping is Lithops's own context-manager exit (job monitor, invoker, then the compute
        handler's ``clear()``): on ``localhost`` it kills the process group of every call still
        running, so an interrupted or terminated run leaves no function process behind
        (issue 18 item 3); calls that returned are not affected.
        """
        try:
            if self.futures:
                self.executor.wait(self.futures, throw_except=False, timeout=timeout_s, show_progressbar=False)
        except Exception:
            pass
        finally:
            try:
                self.executor.__exit__(None, None, None)
            except Exception:
                pass
        try:
            self.executor.clean(clean_cloudobjects=True)
        except Exception:
            pass
