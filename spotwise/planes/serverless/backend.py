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

import atexit
import copy
import logging
import sys
from pathlib import Path
from typing import Any

from spotwise.errors import InputError
from spotwise.inputfiles import read_input_text
from spotwise.safeparse import load_yaml

#: list-and-delete passes over one storage prefix at the end of a run
_CLEAN_PASSES = 3


#: the Lithops backend the functions run on when no config names one
DEFAULT_BACKEND = "localhost"


def localhost_config(max_workers: int) -> dict[str, Any]:
    """Lithops config for the ``localhost`` backend with this interpreter and enough processes."""
    return {
        "lithops": {"backend": DEFAULT_BACKEND, "storage": "localhost", "log_level": "WARNING", "monitoring_interval": 0.1},
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
        self.config = copy.deepcopy(config) if config else localhost_config(max_workers)
        section = self.config.setdefault("lithops", {})
        #: whether the jobs' data is deleted at the end (Lithops's ``data_cleaner``, on unless the config
        #: turns it off): by :meth:`_clean_job_data` in this process, never by Lithops's cleaner process
        self.clean_data = bool(section.get("data_cleaner", True))
        section["data_cleaner"] = False
        self.name = str(section.get("backend", DEFAULT_BACKEND))
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
            atexit.unregister(self.executor._clean_at_exit)  # stopped above; nothing of it is left for the exit
        except AttributeError:
            pass
        if self.clean_data:
            try:
                self._clean_job_data()
            except Exception:
                pass

    def _clean_job_data(self) -> None:
        """Delete what this executor's jobs left in Lithops's storage: the serialised function, each job's
        data and results, its temporary cloud objects.

        In this process, and only this executor's prefixes.  Lithops's own ``executor.clean()`` (and its
        ``atexit`` hook, with ``data_cleaner`` on) drops a request in a machine-wide folder and starts
        ``lithops.scripts.cleaner``, a process in a session of its own that honours every request on the
        machine and exits seconds after the last one: it outlived the run (issue 54 item 7), and a driver
        killed with SIGKILL could not end it.  So ``data_cleaner`` is off in the executor's config and this
        does the same deletions before the backend is done."""
        from lithops.constants import JOBS_PREFIX, TEMP_PREFIX
        from lithops.storage.utils import create_job_key

        ex = self.executor
        storage = ex.internal_storage.storage
        jobs = sorted({create_job_key(f.executor_id, f.job_id) for f in list(ex.futures) + self.futures})
        prefixes = [f"{JOBS_PREFIX}/{ex.executor_id}/"] + [f"{root}/{job}/" for job in jobs for root in (JOBS_PREFIX, TEMP_PREFIX)]
        for prefix in prefixes:
            for _ in range(_CLEAN_PASSES):  # a backend may list keys a delete has not applied yet
                keys = storage.list_keys(storage.bucket, prefix)
                if not keys:
                    break
                storage.delete_objects(storage.bucket, keys)
