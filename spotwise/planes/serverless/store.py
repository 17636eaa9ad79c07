"""The indirect exchange store of a serverless job: Redis (``papers/004_9dc2adb66dc8d26e.txt`` Sec. 3.1).

Serverless functions cannot talk to each other, so MLLess exchanges every update through Redis
("Communication channels", Sec. 3.1).  This module holds:

* :class:`RedisServer` -- a ``redis-server`` that spotwise starts itself, listening on a unix
  socket in a private 0700 temporary directory, with a random password (no persistence: the
  supervisor holds the authoritative model and can re-seed the store), and can restart (fault
  tests) and stop.
* :func:`connect` -- a client for ``redis://[:password@]host:port[/db]``; a wrong URL, an
  unreachable server or a wrong password is an :class:`~spotwise.errors.InputError` (exit 2)
  that says how to fix it.
* :class:`Keys` -- the key layout of one job (every key starts with ``sw:<job id>:``).
* :func:`encode_update` / :func:`decode_update` -- a :class:`~spotwise.planes.serverless.significance.SparseUpdate`
  on the wire: a 16-byte header, ``int32`` (or ``int64`` for models over 2^31 entries) indices
  and ``float32`` values, so an update costs 8 bytes per entry and never the model's size.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import struct
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import numpy as np

from spotwise.errors import InputError
from spotwise.planes.serverless.reaper import reap_stale
from spotwise.planes.serverless.significance import SparseUpdate
from spotwise.watchdog import die_with_parent

_MAGIC = b"SWU1"
_HEADER = struct.Struct("<4sBBxxQ")  # magic, index width (4 or 8), value width (4 or 8), pad, size


def encode_update(update: SparseUpdate, exact: bool = False) -> bytes:
    """``update`` as bytes: header, indices, float32 values (``exact``: float64, for state that
    must come back bit for bit, such as an ISP residual checkpoint)."""
    width = 4 if update.size < 2**31 else 8
    vw = 8 if exact else 4
    idx = update.indices.astype(np.int32 if width == 4 else np.int64, copy=False)
    return (_HEADER.pack(_MAGIC, width, vw, update.size) + idx.tobytes()
            + update.values.astype(np.float64 if exact else np.float32).tobytes())


def decode_update(data: bytes) -> SparseUpdate:
    """Inverse of :func:`encode_update`; :class:`ValueError` for bytes that are not an update."""
    if len(data) < _HEADER.size:
        raise ValueError("truncated update")
    magic, width, vw, size = _HEADER.unpack_from(data)
    if magic != _MAGIC or width not in (4, 8) or vw not in (4, 8):
        raise ValueError("not a spotwise update")
    body = len(data) - _HEADER.size
    nnz, rem = divmod(body, width + vw)
    if rem:
        raise ValueError("truncated update")
    idx = np.frombuffer(data, dtype=np.int32 if width == 4 else np.int64, count=nnz, offset=_HEADER.size)
    val = np.frombuffer(data, dtype=np.float32 if vw == 4 else np.float64, count=nnz, offset=_HEADER.size + nnz * width)
    return SparseUpdate(idx, val, int(size))


def apply_encoded(data: bytes, x: np.ndarray) -> int:
    """``x[indices] += values`` straight from :func:`encode_update` bytes; returns the entries applied.

    The hot path of every pull: no :class:`SparseUpdate` is built (its validation copies and
    checks every entry).  The bytes come from a commit of a worker of this job; a malformed
    payload still raises :class:`ValueError`, and indices are bounds-checked.
    """
    if len(data) < _HEADER.size:
        raise ValueError("truncated update")
    magic, width, vw, size = _HEADER.unpack_from(data)
    if magic != _MAGIC or width not in (4, 8) or vw not in (4, 8) or size != x.size:
        raise ValueError("not an update of this model")
    nnz, rem = divmod(len(data) - _HEADER.size, width + vw)
    if rem:
        raise ValueError("truncated update")
    if nnz:
        idx = np.frombuffer(data, dtype=np.int32 if width == 4 else np.int64, count=nnz, offset=_HEADER.size)
        val = np.frombuffer(data, dtype=np.float32 if vw == 4 else np.float64, count=nnz, offset=_HEADER.size + nnz * width)
        if idx[0] < 0 or idx[-1] >= size:  # sorted by construction
            raise ValueError("update index out of range")
        x[idx] += val
    return int(nnz)


def encoded_finite(data: bytes) -> bool:
    """Whether every value of an :func:`encode_update` payload is finite (checked for all of a step's
    updates before any is applied: a diverged step changes nothing)."""
    if len(data) < _HEADER.size:
        return True  # malformed: apply_encoded says so
    _, width, vw, _ = _HEADER.unpack_from(data)
    if width not in (4, 8) or vw not in (4, 8):
        return True
    nnz = (len(data) - _HEADER.size) // (width + vw)
    val = np.frombuffer(data, dtype=np.float32 if vw == 4 else np.float64, count=nnz, offset=_HEADER.size + nnz * width)
    return bool(np.isfinite(val).all())


def encode_dense(x: np.ndarray) -> bytes:
    """A dense float32 vector (a model snapshot or replica)."""
    return np.ascontiguousarray(x, dtype=np.float32).tobytes()


def decode_dense(data: bytes, size: int) -> np.ndarray:
    """Inverse of :func:`encode_dense` (a writable copy); :class:`ValueError` on a size mismatch."""
    if len(data) != 4 * size:
        raise ValueError(f"snapshot has {len(data) // 4} entries, the model has {size}")
    return np.frombuffer(data, dtype=np.float32).copy()


@dataclass(frozen=True)
class RedisURL:
    """Where the store is: host and port, or a unix socket; password (may be empty); database number.

    ``socket_path`` (an absolute path) replaces host and port: spotwise's private
    :class:`RedisServer` listens only on a unix socket inside its private 0700 folder, an address
    no other user can take over (issue 18 item 4).  ``password_file`` (optional) names a 0600 file
    holding the password: what a function on this machine is given instead of the password itself
    (item 5, see :meth:`for_function`).
    """

    host: str
    port: int
    password: str = ""
    db: int = 0
    socket_path: str = ""
    password_file: str = ""

    def __post_init__(self) -> None:
        if self.socket_path:
            if not os.path.isabs(self.socket_path):
                raise ValueError(f"the Redis unix socket path must be absolute, got {self.socket_path!r}")
        else:
            if not self.host:
                raise InputError("the Redis URL has no host", "write it as redis://:PASSWORD@HOST:PORT", "--redis-url")
            if not 0 < self.port < 65536:
                raise InputError(f"port {self.port} is out of range", "use a TCP port in 1-65535 (Redis's default is 6379)", "--redis-url")
        if self.db < 0:
            raise InputError(f"database {self.db} is negative", "use a database number >= 0, e.g. redis://host:6379/0", "--redis-url")

    def _where(self) -> str:
        return f"unix://{{auth}}{self.socket_path}?db={self.db}" if self.socket_path else f"redis://{{auth}}{self.host}:{self.port}/{self.db}"

    @property
    def url(self) -> str:
        auth = f":{self.password}@" if self.password else ""
        return self._where().format(auth=auth)

    @property
    def redacted(self) -> str:
        """The URL with the password hidden (for logs and messages)."""
        return self._where().format(auth=":***@" if self.password or self.password_file else "")

    def client_options(self) -> dict[str, Any]:
        """Keyword arguments of ``redis.Redis`` for this address (password read from its file if need be)."""
        where: dict[str, Any] = {"unix_socket_path": self.socket_path} if self.socket_path else {"host": self.host, "port": self.port}
        return {**where, "password": self.secret() or None, "db": self.db}

    def secret(self) -> str:
        """The password, read from ``password_file`` when it is not held inline."""
        if self.password or not self.password_file:
            return self.password
        return Path(self.password_file).read_text(encoding="utf-8").strip()

    def to_dict(self) -> dict[str, Any]:
        return {"host": self.host, "port": self.port, "password": self.password, "db": self.db, "socket_path": self.socket_path,
                "password_file": self.password_file}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "RedisURL":
        """Inverse of :meth:`to_dict` (what a function receives)."""
        return cls(str(d.get("host", "")), int(d.get("port", 0)), str(d.get("password", "")), int(d.get("db", 0)),
                   str(d.get("socket_path", "")), str(d.get("password_file", "")))


def parse_redis_url(url: str) -> RedisURL:
    """``redis://[user][:password@]host[:port][/db]`` -> :class:`RedisURL`; InputError (exit 2) if malformed."""
    where = "--redis-url"
    fix = "write it as redis://:PASSWORD@HOST:PORT/DB, e.g. redis://:secret@127.0.0.1:6379/0 (password and /DB optional)"
    if not isinstance(url, str) or "://" not in url:
        raise InputError(f"{url!r} is not a Redis URL", fix, where)
    try:
        u = urlparse(url)
        port = u.port if u.port is not None else 6379  # ``:0`` is refused below, never taken for 6379
    except ValueError as e:
        raise InputError(f"malformed Redis URL ({e})", fix, where) from None
    if u.scheme != "redis":
        raise InputError(f"scheme {u.scheme!r} is not supported", "use redis:// (TLS and unix sockets are not supported)", where)
    path = (u.path or "").strip("/")
    try:
        db = int(path) if path else 0
    except ValueError:
        raise InputError(f"database {path!r} is not a number", fix, where) from None
    return RedisURL(u.hostname or "", int(port), unquote(u.password or ""), db)


def connect(url: RedisURL, timeout_s: float = 5.0) -> Any:
    """A ``redis.Redis`` client for ``url`` after a PING; InputError (exit 2) when it cannot be used."""
    import redis
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    opts = dict(**url.client_options(), socket_connect_timeout=timeout_s)
    probe = redis.Redis(**opts, socket_timeout=timeout_s, retry=Retry(NoBackoff(), 0))  # fail fast, no retries
    not_redis = InputError(f"the service at {url.redacted} does not speak Redis (its answer to PING is not Redis's protocol)",
                           "point --redis-url at a Redis server (redis-server listens on 6379 by default), "
                           "or leave --redis-url out and spotwise starts its own", "--redis-url")
    try:
        if probe.ping() is not True:  # a reply in Redis's framing that is not PONG
            raise not_redis
    except redis.AuthenticationError:
        if not url.password:
            raise InputError(f"Redis at {url.redacted} needs a password", "put it in the URL: redis://:PASSWORD@host:port",
                             "--redis-url") from None
        raise InputError(f"Redis at {url.redacted} refused the password", "give the right password in the URL (redis://:PASSWORD@host:port)",
                         "--redis-url") from None
    except redis.exceptions.InvalidResponse:  # e.g. an HTTP or SSH server: "Protocol error, got 'H' as reply type byte"
        raise not_redis from None
    except (AttributeError, TypeError, ValueError, UnicodeDecodeError):
        # redis-py chokes on a handshake reply in Redis's framing but of the wrong shape (HELLO
        # answered by a string, not a map): whatever listens there is not Redis
        raise not_redis from None
    except redis.ResponseError as e:
        if "NOAUTH" in str(e) or "AUTH" in str(e).upper():
            raise InputError(f"Redis at {url.redacted} needs a password", "put it in the URL: redis://:PASSWORD@host:port",
                             "--redis-url") from None
        raise InputError(f"Redis at {url.redacted} answered {e}", "check the URL points at a Redis server", "--redis-url") from None
    except redis.TimeoutError as e:
        if "connecting" in str(e).lower():  # no TCP connection within the timeout: nothing answered there
            raise InputError(f"cannot reach Redis at {url.redacted} ({e})",
                             "start redis-server there, fix the host/port, or leave --redis-url out and spotwise starts its own",
                             "--redis-url") from None
        raise InputError(f"the service at {url.redacted} did not answer a Redis PING within {timeout_s:g} s (is it Redis?)",
                         "point --redis-url at a Redis server, or leave --redis-url out and spotwise starts its own",
                         "--redis-url") from None
    except (redis.ConnectionError, OSError) as e:
        raise InputError(f"cannot reach Redis at {url.redacted} ({e})",
                         "start redis-server there, fix the host/port, or leave --redis-url out and spotwise starts its own",
                         "--redis-url") from None
    finally:
        probe.close()
    return redis.Redis(**opts, socket_timeout=max(timeout_s, 30.0))


def write_secret_file(folder: Path, secret: str, name: str = "password") -> Path:
    """Write ``secret`` to ``folder/name``, readable by this user only (0600, never through a link)."""
    path = Path(folder) / name
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(secret)
    os.chmod(path, 0o600)
    return path


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def redis_server_binary() -> str:
    """Path of ``redis-server``; InputError (exit 2) saying how to install it when absent."""
    path = shutil.which("redis-server") or next((p for p in ("/usr/bin/redis-server", "/usr/local/bin/redis-server") if os.path.exists(p)), None)
    if path is None:
        raise InputError("redis-server is not installed", "install it (Debian/Ubuntu: apt-get install -y redis-server), "
                         "or pass --redis-url of an existing Redis", "redis-server")
    return path


class RedisServer:
    """A private ``redis-server`` with a random password in a private (0700) temporary directory.

    It listens only on a unix socket inside that directory (``port 0``, no TCP at all): while the
    server is down nobody else can take its address over, so a client that reconnects after a
    crash or a :meth:`restart` can only ever reach this server -- the password is never sent to
    whatever another program put on a freed TCP port (issue 18 item 4).  ``tcp=True`` listens on
    127.0.0.1 at ``port`` (a free one if not given) as well: the stand-in for an operator's own
    Redis given by ``--redis-url`` in tests and benchmarks; even then readiness is checked over the
    unix socket, so no password goes over TCP before this ``redis-server`` holds the port.

    No persistence (``save ""``, ``appendonly no``): the store holds only what the supervisor
    can re-seed.  :meth:`restart` stops and starts it on the same address and password (what a
    crashed store looks like to the job); :meth:`stop` removes the temporary directory.
    """

    def __init__(self, port: int | None = None, password: str | None = None, maxmemory_mb: int = 0, tcp: bool = False) -> None:
        self.binary = redis_server_binary()
        self.tcp = bool(tcp or port)
        self.port: int | None = (int(port) if port else _free_port()) if self.tcp else None
        self.password = password if password is not None else secrets.token_hex(16)
        self.maxmemory_mb = int(maxmemory_mb)
        reap_stale()  # what a killed run left: its store, functions and password folder (issue 30 item 7)
        self.dir = Path(tempfile.mkdtemp(prefix="spotwise-redis-"))
        if len(str(self.dir / "redis.sock")) > 100:  # sun_path holds 108 bytes: a long $TMPDIR falls back to /tmp
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = Path(tempfile.mkdtemp(prefix="spotwise-redis-", dir="/tmp"))
        os.chmod(self.dir, 0o700)  # mkdtemp's mode already; the socket's safety rests on it
        self.socket_path = self.dir / "redis.sock"
        #: the password for functions on this machine: they are given this path, not the secret
        self.password_file = write_secret_file(self.dir, self.password)
        self.proc: subprocess.Popen[bytes] | None = None
        self.started_at: float | None = None
        self.restarts = 0
        try:
            self.start()
        except BaseException:  # an interrupt (Ctrl-C, SIGTERM) while it starts leaves no server nor folder
            self.stop()
            raise

    @property
    def url(self) -> RedisURL:
        """The address clients use: the TCP port with ``tcp=True``, else the unix socket."""
        if self.port is not None:
            return RedisURL("127.0.0.1", self.port, self.password, 0)
        return RedisURL("", 0, self.password, 0, socket_path=str(self.socket_path))

    def start(self, timeout_s: float = 10.0) -> None:
        """Start ``redis-server`` (again) and wait until it answers on its unix socket."""
        conf = self.dir / "redis.conf"
        lines = [
            f"port {self.port or 0}", f"unixsocket {self.socket_path}", "unixsocketperm 700", f"requirepass {self.password}",
            f"dir {self.dir}", 'save ""', "appendonly no", "protected-mode yes", "daemonize no", "loglevel warning",
            f"logfile {self.dir / 'redis.log'}",
        ]
        if self.port is not None:
            lines.insert(0, "bind 127.0.0.1")
        if self.maxmemory_mb:
            lines.append(f"maxmemory {self.maxmemory_mb}mb")
        fd = os.open(conf, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # it holds the password: never readable by others
        with os.fdopen(fd, "w") as f:
            f.write("\n".join(lines) + "\n")
        os.chmod(conf, 0o600)
        # dies with the driver even when it is killed with SIGKILL (issue 30 item 7): the parent-death
        # signal follows the starting thread, so only from the main thread (not a short-lived timer's)
        pdeath = die_with_parent if threading.current_thread() is threading.main_thread() else None
        self.proc = subprocess.Popen([self.binary, str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     start_new_session=True, preexec_fn=pdeath)
        deadline = time.monotonic() + timeout_s
        import redis

        while True:
            if self.proc.poll() is not None:
                log = (self.dir / "redis.log").read_text(errors="replace")[-500:] if (self.dir / "redis.log").exists() else ""
                raise RuntimeError(f"redis-server exited with code {self.proc.returncode}: {log}")
            try:
                # the unix socket in our 0700 folder: only this server can be listening there
                c = redis.Redis(unix_socket_path=str(self.socket_path), password=self.password, socket_connect_timeout=0.5)
                try:
                    c.ping()
                finally:
                    c.close()
                break
            except (redis.ConnectionError, redis.TimeoutError, OSError):
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"redis-server did not answer on {self.socket_path} within {timeout_s:g} s")
                time.sleep(0.02)
        self.started_at = time.time()

    def kill(self) -> None:
        """Stop the server process now (SIGKILL): the store's content is gone."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.proc = None

    def restart(self) -> None:
        """Kill and start again on the same address and password (empty store)."""
        self.kill()
        self.start()
        self.restarts += 1

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> "RedisServer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


class Keys:
    """Key names of one job in the store (all under ``sw:<job>:``).

    ``model`` / ``model_version``: the supervisor's replica snapshot and the step it holds;
    ``upd:<t>:<w>``: worker ``w``'s significant update of step ``t``; ``loss:<t>:<w>``; ``clock:<w>``:
    steps worker ``w`` has committed; ``resid:<w>``: its accumulated insignificant update;
    ``inc:<w>``: its live incarnation (a fenced, lost function's late writes are refused);
    ``members``: the membership schedule; ``leave:<w>``: the step at which ``w`` leaves;
    ``replica:<w>``: a leaving worker's replica; ``hb:<w>``: heartbeat; ``stop``; ``fault:<w>``.
    """

    def __init__(self, job: str) -> None:
        if not job or any(c in job for c in " \n\r\t"):
            raise ValueError(f"bad job id {job!r}")
        self.job = job
        self.prefix = f"sw:{job}:"

    def __getattr__(self, name: str) -> str:
        if name.startswith("_"):
            raise AttributeError(name)
        return self.prefix + name

    def upd(self, t: int, w: int) -> str:
        return f"{self.prefix}upd:{t}:{w}"

    def meta(self, t: int, w: int) -> str:
        return f"{self.prefix}meta:{t}:{w}"

    def per(self, what: str, w: int) -> str:
        return f"{self.prefix}{what}:{w}"

    def pattern(self) -> str:
        return self.prefix + "*"


#: the atomic commit of one step by one worker (KEYS: inc, clock, upd, meta, ckpt_x, ckpt_r,
#: ckpt_meta; ARGV: incarnation, step, update bytes, meta json, ttl seconds, then the ISP replica
#: checkpoint (replica, residual, its json) or three empty strings).  Refused (0) when the caller
#: is not the live incarnation, (-1) when the step is not the next one: a fenced (lost) function's
#: late write never lands, and a step is never committed twice.
COMMIT_LUA = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
local c = tonumber(redis.call('GET', KEYS[2]) or '0')
if c ~= tonumber(ARGV[2]) then return -1 end
redis.call('SET', KEYS[3], ARGV[3], 'EX', ARGV[5])
redis.call('SET', KEYS[4], ARGV[4], 'EX', ARGV[5])
if ARGV[8] ~= '' then
  redis.call('SET', KEYS[5], ARGV[6])
  redis.call('SET', KEYS[6], ARGV[7])
  redis.call('SET', KEYS[7], ARGV[8])
end
redis.call('SET', KEYS[2], c + 1)
return 1
"""


#: a replica checkpoint outside a commit (a function ending its lease).  KEYS: inc, clock, ckpt_x,
#: ckpt_r, ckpt_meta; ARGV: incarnation, the clock it was taken at, replica, residual, json.
#: Stored only by the live incarnation at its current clock.
CHECKPOINT_LUA = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if tonumber(redis.call('GET', KEYS[2]) or '0') ~= tonumber(ARGV[2]) then return -1 end
redis.call('SET', KEYS[3], ARGV[3])
redis.call('SET', KEYS[4], ARGV[4])
redis.call('SET', KEYS[5], ARGV[5])
return 1
"""
