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
    from spotwise.serverless.store import connect, parse_redis_url

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
