"""Process and secret hygiene of the serverless plane (issue 18 items 3, 4, 5 and 11).

Every test here uses real listeners on 127.0.0.1 (plain TCP servers that record what they
receive), a real ``redis-server`` and, where a run is needed, real Lithops localhost functions.
"""

from __future__ import annotations

import json
import shutil
import socket
import threading
from typing import Callable

import pytest

pytestmark = pytest.mark.skipif(shutil.which("redis-server") is None,
                                reason="redis-server is not installed (README command 2 installs it with apt)")

PMF = {"name": "pmf", "family": "pmf", "batch_size": 256, "lr": 5.0, "eval_every": 1000,
       "params": {"n_users": 300, "n_items": 400, "n_ratings": 20000, "rank": 8}}


class RecordingServer:
    """A TCP server on 127.0.0.1 that records every byte it receives and answers with ``reply``.

    ``reply`` is called with the bytes received so far on a connection and returns what to send
    (``b""``: nothing yet).  ``port=0`` picks a free port; a given port is bound with
    SO_REUSEADDR (what another program taking over a freed port looks like).
    """

    def __init__(self, reply: Callable[[bytes], bytes], port: int = 0) -> None:
        self.reply = reply
        self.received = bytearray()
        self.connections = 0
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", port))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.port = int(self.sock.getsockname()[1])
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except (socket.timeout, OSError):
                continue
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        with self._lock:
            self.connections += 1
        conn.settimeout(0.2)
        seen = b""
        with conn:
            while not self._stop.is_set():
                try:
                    data = conn.recv(65536)
                except socket.timeout:
                    continue
                except OSError:
                    return
                if not data:
                    return
                seen += data
                with self._lock:
                    self.received += data
                out = self.reply(seen)
                if out:
                    try:
                        conn.sendall(out)
                    except OSError:
                        return

    def close(self) -> None:
        self._stop.set()
        self.sock.close()
        self.thread.join(timeout=5)


def http_reply(seen: bytes) -> bytes:
    return b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"


def garbage_reply(seen: bytes) -> bytes:
    return b"\x00\xff\x13garbage that is no protocol at all\r\n"


def plus_reply(seen: bytes) -> bytes:
    return b"+HELLO\r\n"  # Redis's framing, but not Redis (PING must answer PONG)


# ---------------------------------------------------------------------------------- item 11
@pytest.mark.parametrize("reply", [http_reply, garbage_reply, plus_reply], ids=["http", "garbage", "not-pong"])
def test_a_redis_url_of_a_service_that_is_not_redis_is_an_input_error(reply):
    from spotwise.errors import InputError
    from spotwise.planes.serverless.store import connect, parse_redis_url

    srv = RecordingServer(reply)
    try:
        with pytest.raises(InputError) as e:
            connect(parse_redis_url(f"redis://127.0.0.1:{srv.port}/0"), timeout_s=2.0)
        assert "does not speak Redis" in str(e.value) and "--redis-url" in str(e.value)
        assert srv.connections >= 1 and srv.received  # it was really asked (HELLO or PING)
    finally:
        srv.close()


def test_cli_run_with_a_redis_url_of_an_http_server_exits_2(cli, tmp_path):
    spec = tmp_path / "s.yaml"
    spec.write_text(json.dumps({"name": "cli-sl", "workload": PMF, "target": {"iterations": 3},
                                "cluster": {"kind": "serverless", "workers": 2, "sync": "bsp"},
                                "outputs": {"checkpoint_every": 0, "plots": False}}))
    srv = RecordingServer(http_reply)
    try:
        code, out, err = cli("run", str(spec), "--out", str(tmp_path / "o"), "--redis-url", f"redis://127.0.0.1:{srv.port}/0")
    finally:
        srv.close()
    assert code == 2, err
    assert "does not speak Redis" in err and "Traceback" not in err
    assert not (tmp_path / "o").exists() or not any((tmp_path / "o").iterdir())


# ---------------------------------------------------------------------------------- item 4
def _tcp_listen_ports(pid: int) -> set[int]:
    import psutil

    return {c.laddr.port for c in psutil.Process(pid).net_connections("inet") if c.status == psutil.CONN_LISTEN}


def test_private_redis_listens_only_on_a_unix_socket_in_its_private_folder():
    import os
    import stat

    from spotwise.planes.serverless.store import RedisServer, connect

    with RedisServer() as srv:
        assert _tcp_listen_ports(srv.proc.pid) == set()  # no TCP port anyone could take over
        assert stat.S_IMODE(os.stat(srv.dir).st_mode) == 0o700
        assert srv.url.socket_path and os.path.dirname(srv.url.socket_path) == str(srv.dir)
        assert stat.S_IMODE(os.stat(srv.dir / "redis.conf").st_mode) == 0o600
        c = connect(srv.url)
        c.set("k", "v")
        srv.restart()
        assert _tcp_listen_ports(srv.proc.pid) == set()
        assert connect(srv.url).get("k") is None  # the same address, a fresh (empty) server
    assert not srv.dir.exists()


def test_a_restarted_private_redis_never_sends_the_password_to_whoever_took_its_port(tmp_path):
    """spotwise's own redis-server dies mid-run and another program takes every TCP port it had:
    neither the supervisor nor any function sends the password there, and the run goes on (on the
    restarted private server) to the parameters of a fault-free run."""
    import numpy as np

    from spotwise.config import spec_from_dict
    from spotwise.planes.serverless.store import RedisServer
    from spotwise.planes.serverless.runner import serverless_controller

    spec = spec_from_dict({"name": "squat", "workload": PMF, "target": {"iterations": 14},
                           "cluster": {"kind": "serverless", "workers": 2, "sync": "bsp"},
                           "outputs": {"checkpoint_every": 0, "plots": False}})
    srv = RedisServer()
    squatters: list[RecordingServer] = []
    state = {"killed": False, "ports": set()}

    def progress(snap):
        if snap["step"] == 6 and not state["killed"]:
            state["killed"] = True
            state["ports"] = _tcp_listen_ports(srv.proc.pid)
            srv.kill()
            for port in state["ports"]:  # another program takes the freed port at once
                squatters.append(RecordingServer(lambda seen: b"-ERR unknown command\r\n", port=port))

    try:
        sup = serverless_controller(spec, tmp_path / "r", redis_server=srv, progress=progress, heartbeat_timeout_s=6.0)
        s = sup.run()
    finally:
        for sq in squatters:
            sq.close()
    assert state["killed"]
    for sq in squatters:
        assert srv.password.encode() not in bytes(sq.received), "the password went to the program on the old port"
    assert s.status == "completed" and s.steps == 14 and s.extra["store_reseeds"] >= 1
    from test_serverless import sgd_reference

    assert np.allclose(sup.params, sgd_reference(spec, 14), rtol=1e-4, atol=1e-5)
    assert not srv.dir.exists()


# ---------------------------------------------------------------------------------- item 5
def _exposed(secret: bytes, roots: list[str]) -> list[str]:
    """Files under ``roots`` holding ``secret`` that a group or other user could read, and
    processes whose (world-readable) command line holds it."""
    import glob
    import os
    import stat

    hits: list[str] = []
    for root in roots:
        for path in glob.glob(os.path.join(root, "**"), recursive=True):
            try:
                st = os.lstat(path)
                if not stat.S_ISREG(st.st_mode):
                    continue
                with open(path, "rb") as f:
                    data = f.read()
            except OSError:
                continue
            if secret in data and st.st_mode & 0o044:
                hits.append(f"{path} (mode {stat.S_IMODE(st.st_mode):o})")
    for cmdline in glob.glob("/proc/[0-9]*/cmdline"):
        try:
            with open(cmdline, "rb") as f:
                if secret in f.read():
                    hits.append(cmdline)
        except OSError:
            continue
    return hits


def _scan_roots(out) -> list[str]:
    import glob
    import tempfile

    from lithops.constants import CONFIG_DIR, LITHOPS_TEMP_DIR

    return [LITHOPS_TEMP_DIR, CONFIG_DIR, *glob.glob(f"{tempfile.gettempdir()}/spotwise-*"), str(out)]


@pytest.mark.parametrize("own", [True, False], ids=["private-redis", "redis-url"])
def test_the_redis_password_is_in_no_file_others_can_read(tmp_path, own):
    """During and after a run on Lithops localhost functions, no file Lithops or spotwise wrote
    (job payloads ``lithops.jobs/*/aggdata.pickle``, task files, logs, the run directory, the
    private folder) nor any command line holds the Redis password readable by others."""
    from spotwise.config import spec_from_dict
    from spotwise.planes.serverless.store import RedisServer
    from spotwise.planes.serverless.runner import serverless_controller

    spec = spec_from_dict({"name": "secret", "workload": PMF, "target": {"iterations": 8},
                           "cluster": {"kind": "serverless", "workers": 2, "sync": "bsp"},
                           "outputs": {"checkpoint_every": 4, "plots": False}})
    out = tmp_path / "run"
    srv = RedisServer(tcp=not own)
    secret = srv.password.encode()
    during: list[str] = []
    import glob
    import tempfile

    secret_dirs = set(glob.glob(f"{tempfile.gettempdir()}/spotwise-secret-*"))

    def progress(snap):
        if snap["step"] == 5 and not during:
            during.extend(_exposed(secret, _scan_roots(out)) or ["(scanned, clean)"])

    try:
        kw = {"redis_server": srv} if own else {"redis_url": srv.url}
        s = serverless_controller(spec, out, progress=progress, heartbeat_timeout_s=6.0, **kw).run()
        after = _exposed(secret, _scan_roots(out))
    finally:
        srv.stop()
    assert s.status == "completed" and s.steps == 8
    assert during == ["(scanned, clean)"], during
    assert after == [], after
    assert set(glob.glob(f"{tempfile.gettempdir()}/spotwise-secret-*")) == secret_dirs  # the private copy is gone


def test_the_backend_deletes_its_jobs_data_itself_and_leaves_no_process() -> None:
    """Issue 54 item 7: Lithops's own clean-up starts ``lithops.scripts.cleaner``, a machine-wide process in
    a session of its own that lived on for seconds after the run (the suite's leftover check found it).
    The backend's end deletes the executor's job data (the function, each call's data, status and result)
    in this process: afterwards none of it is in Lithops's storage and no process of it is alive."""
    import glob
    import os

    from _leftovers import _cmdline, descendants
    from lithops.constants import LITHOPS_TEMP_DIR

    from spotwise.planes.serverless.backend import LithopsBackend

    backend = LithopsBackend(max_workers=2)
    ex = backend.executor
    backend.futures.append(ex.call_async(os.path.basename, "a/b", include_modules=None))
    backend.futures.extend(ex.map(os.path.basename, ["c/d", "e/f"], include_modules=None))
    assert [f.result() for f in backend.futures] == ["b", "d", "f"]

    def job_files() -> list[str]:
        return [p for p in glob.glob(f"{LITHOPS_TEMP_DIR}/storage/**", recursive=True)
                if ex.executor_id in p and os.path.isfile(p)]

    assert job_files(), "the calls stored nothing (the check would prove nothing)"
    backend.shutdown()
    assert job_files() == []
    cleaners = [_cmdline(p) for p in descendants(os.getpid()) if "lithops" in _cmdline(p)]
    assert cleaners == [], cleaners
