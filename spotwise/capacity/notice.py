"""Preemption notices from the cloud's instance-metadata service.

On a real cluster every spot/preemptible worker node runs a :class:`NoticeWatcher` that polls
its cloud's metadata endpoint and reports an upcoming revocation, so the coordinator can
checkpoint and drain the worker before it disappears (DESIGN.md, "Run").  The warning is short:

* **AWS** -- a spot interruption notice appears at
  ``/latest/meta-data/spot/instance-action`` two minutes before the instance is stopped,
  hibernated or terminated (``{"action": "terminate", "time": "2017-09-18T08:22:00Z"}``; 404
  while there is none).  A *rebalance recommendation* at
  ``/latest/meta-data/events/recommendations/rebalance`` (``{"noticeTime": ...}``) may come
  earlier; it is reported as action ``"rebalance"`` with ``at=None``.
  IMDSv2 is used (``PUT /latest/api/token``), with a fall-back to IMDSv1 when the token PUT is
  refused with 403/404/405.
* **GCP** -- ``/computeMetadata/v1/instance/preempted`` turns from ``FALSE`` to ``TRUE`` about
  30 s before a preemptible/spot VM is stopped (reported as action ``"preempted"``, with
  ``at = first seen + grace_s``).  ``/computeMetadata/v1/instance/maintenance-event``
  (``NONE`` normally, e.g. ``TERMINATE_ON_HOST_MAINTENANCE`` before host maintenance) is
  reported as an informational notice, action ``"maintenance"``.

Failure behaviour: a source's :meth:`NoticeSource.poll` never raises for network trouble.  A
connection error, timeout or unexpected HTTP status is *not* a notice: it increments
``errors`` (and ``consecutive_errors``, reset by the next successful poll) and records
``last_error``, so the caller can tell that the metadata service is unreachable (e.g. not on a
cloud VM).  A 200 answer whose body is not the JSON expected (AWS) *is* treated as a notice --
the endpoint only answers 200 when the provider has something to say, and a needless checkpoint
is cheaper than a lost worker -- with the body kept in ``raw``, ``at=None`` and, for
instance-action, ``action="unknown"``.

Only the standard library is used (``urllib.request``), with proxies disabled so that the
link-local metadata address is always contacted directly.
"""

from __future__ import annotations

import abc
import logging
import math
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Callable

from spotwise.errors import InputError
from spotwise.safeparse import loads_json

__all__ = [
    "DEFAULT_METADATA_URL",
    "PreemptionNotice",
    "NoticeSource",
    "AwsNoticeSource",
    "GcpNoticeSource",
    "NoticeWatcher",
    "detect_cloud",
    "make_notice_source",
    "NOTICE_SOURCES",
]

log = logging.getLogger(__name__)

#: The link-local instance-metadata address shared by AWS and GCP.
DEFAULT_METADATA_URL = "http://169.254.169.254"

#: Actions that announce no imminent revocation (the instance keeps running for now).
INFORMATIONAL_ACTIONS = frozenset({"rebalance", "maintenance"})


@dataclass(frozen=True)
class PreemptionNotice:
    """One notice read from a metadata service.

    ``cloud`` -- ``"aws"`` or ``"gcp"``; ``action`` -- what the provider will do
    (``"terminate"``, ``"stop"``, ``"hibernate"``, ``"preempted"``, ``"unknown"`` for an
    unparseable AWS body) or an informational ``"rebalance"`` / ``"maintenance"``; ``at`` --
    epoch seconds of the expected revocation, or ``None`` if unknown; ``received`` -- epoch
    seconds when the notice was first read; ``raw`` -- the body as served.
    """

    cloud: str
    action: str
    at: float | None
    received: float
    raw: str

    @property
    def key(self) -> tuple[str, str, float | None, str]:
        """Identity used for de-duplication: everything but ``received``."""
        return (self.cloud, self.action, self.at, self.raw)

    @property
    def imminent(self) -> bool:
        """True when the notice announces a revocation (not a rebalance/maintenance hint)."""
        return self.action not in INFORMATIONAL_ACTIONS


# --------------------------------------------------------------------------------------------
# HTTP plumbing


class _Unreachable(Exception):
    """The request got no HTTP answer (connection refused, timeout, reset, bad URL...)."""


# No proxies: the metadata service must be reached directly, whatever *_proxy says.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@dataclass(frozen=True)
class _Response:
    status: int
    body: str
    headers: dict[str, str]


def _request(method: str, url: str, headers: dict[str, str], timeout: float) -> _Response:
    """One HTTP request; HTTP error statuses are returned, transport failures raise _Unreachable."""
    data = b"" if method == "PUT" else None
    req = urllib.request.Request(url, data=data, headers=headers, method=method)
    try:
        with _OPENER.open(req, timeout=timeout) as resp:
            body = resp.read().decode("utf-8", "replace")
            return _Response(resp.status, body, {k.lower(): v for k, v in resp.headers.items()})
    except urllib.error.HTTPError as err:
        try:
            body = err.read().decode("utf-8", "replace")
        except Exception:  # noqa: BLE001 -- the body of an error answer is best effort
            body = ""
        hdrs = {k.lower(): v for k, v in err.headers.items()} if err.headers else {}
        return _Response(err.code, body, hdrs)
    except (urllib.error.URLError, OSError, ValueError) as err:  # timeouts are OSErrors
        raise _Unreachable(f"{method} {url}: {getattr(err, 'reason', err)}") from err
    except Exception as err:  # noqa: BLE001 -- e.g. http.client.RemoteDisconnected/BadStatusLine
        raise _Unreachable(f"{method} {url}: {err!r}") from err


def _parse_time(value: object) -> float | None:
    """ISO-8601 time (``2017-09-18T08:22:00Z``) -> epoch seconds; None if absent or malformed."""
    if not isinstance(value, str) or not value:
        return None
    text = value.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    try:
        dt = datetime.fromisoformat(text)
    except ValueError:
        return None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return dt.timestamp()


def _positive(name: str, value: float) -> float:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0 or math.isinf(value):
        raise InputError(f"must be a positive number of seconds, got {value!r}", "pass e.g. 1.0", name)
    return float(value)


# --------------------------------------------------------------------------------------------
# Sources


class NoticeSource(abc.ABC):
    """Something that can be polled for a preemption notice.

    Subclasses implement :meth:`_poll`, which may raise :class:`_Unreachable` or return an
    unexpected-status message; :meth:`poll` turns those into the error counters.
    """

    cloud: str = ""

    def __init__(self, base_url: str = DEFAULT_METADATA_URL, timeout: float = 1.0,
                 clock: Callable[[], float] = time.time) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = _positive("timeout", timeout)
        self.clock = clock
        self.errors = 0
        self.consecutive_errors = 0
        self.last_error: str | None = None
        self.polls = 0

    @property
    def reachable(self) -> bool:
        """False once the latest poll failed to get an answer it understood."""
        return self.consecutive_errors == 0

    def poll(self) -> PreemptionNotice | None:
        """Read the metadata service once; the notice if there is one, else None. Never raises
        for network trouble (see the module docstring)."""
        self.polls += 1
        errors_before = self.errors
        try:
            notice = self._poll()
        except _Unreachable as err:
            self._error(str(err))
            return None
        if self.errors == errors_before:  # _poll may have counted an error itself
            self.consecutive_errors = 0
        return notice

    def _error(self, message: str) -> None:
        self.errors += 1
        self.consecutive_errors += 1
        self.last_error = message
        level = logging.WARNING if self.consecutive_errors == 1 else logging.DEBUG
        log.log(level, "%s metadata service: %s (errors so far: %d)", self.cloud, message, self.errors)

    @abc.abstractmethod
    def _poll(self) -> PreemptionNotice | None:
        ...

    def __repr__(self) -> str:
        return f"{type(self).__name__}(base_url={self.base_url!r}, errors={self.errors})"


class AwsNoticeSource(NoticeSource):
    """EC2 spot interruption notices and rebalance recommendations via IMDSv2 (IMDSv1 fall-back).

    The session token (``PUT /latest/api/token``, TTL ``token_ttl_s``) is cached until
    ``token_refresh_margin_s`` before it expires, and fetched again at once if a GET answers 401.
    If the PUT is answered 403/404/405 (IMDSv2 unavailable), requests go without a token, and the
    PUT is tried again after ``v1_retry_s``.  A PUT that gets no answer at all counts as an error
    and the poll ends there (no GET is tried, so an unreachable service costs one timeout).
    """

    cloud = "aws"
    TOKEN_PATH = "/latest/api/token"
    ACTION_PATH = "/latest/meta-data/spot/instance-action"
    REBALANCE_PATH = "/latest/meta-data/events/recommendations/rebalance"
    TTL_HEADER = "X-aws-ec2-metadata-token-ttl-seconds"
    TOKEN_HEADER = "X-aws-ec2-metadata-token"

    def __init__(self, base_url: str = DEFAULT_METADATA_URL, timeout: float = 1.0, *,
                 clock: Callable[[], float] = time.time, token_ttl_s: int = 21600,
                 token_refresh_margin_s: float = 60.0, v1_retry_s: float = 300.0,
                 check_rebalance: bool = True) -> None:
        super().__init__(base_url, timeout, clock)
        if not isinstance(token_ttl_s, int) or not 1 <= token_ttl_s <= 21600:
            raise InputError(f"must be an integer in 1..21600, got {token_ttl_s!r}",
                             "IMDSv2 tokens live 1 s to 6 h; the default is 21600", "token_ttl_s")
        self.token_ttl_s = token_ttl_s
        self.token_refresh_margin_s = float(token_refresh_margin_s)
        self.v1_retry_s = float(v1_retry_s)
        self.check_rebalance = check_rebalance
        self._token: str | None = None
        self._token_expires = 0.0
        self._v1_until = 0.0  # while clock() < this, use IMDSv1 (no token)
        self.token_fetches = 0

    @property
    def imds_version(self) -> int:
        """2 while using a session token, 1 after falling back."""
        return 1 if self.clock() < self._v1_until else 2

    def _headers(self, refresh: bool = False) -> dict[str, str] | None:
        """Headers for a metadata GET; None when the token PUT got no usable answer (error counted)."""
        now = self.clock()
        if now < self._v1_until:
            return {}
        if refresh or self._token is None or now >= self._token_expires - self.token_refresh_margin_s:
            self._token = None
            self.token_fetches += 1
            resp = _request("PUT", self.base_url + self.TOKEN_PATH,
                            {self.TTL_HEADER: str(self.token_ttl_s)}, self.timeout)
            if resp.status in (403, 404, 405):
                log.info("IMDSv2 token refused (HTTP %d); falling back to IMDSv1", resp.status)
                self._v1_until = now + self.v1_retry_s
                return {}
            if resp.status != 200 or not resp.body.strip():
                self._error(f"PUT {self.TOKEN_PATH}: HTTP {resp.status}")
                return None
            try:
                ttl = float(resp.headers.get(self.TTL_HEADER.lower(), self.token_ttl_s))
            except ValueError:
                ttl = float(self.token_ttl_s)
            self._token = resp.body.strip()
            self._token_expires = now + ttl
        return {self.TOKEN_HEADER: self._token}

    def _get(self, path: str) -> _Response | None:
        headers = self._headers()
        if headers is None:
            return None
        resp = _request("GET", self.base_url + path, headers, self.timeout)
        if resp.status == 401 and self.TOKEN_HEADER in headers:
            # token expired or the service restarted: fetch a new one and retry once
            headers = self._headers(refresh=True)
            if headers is None:
                return None
            resp = _request("GET", self.base_url + path, headers, self.timeout)
        if resp.status not in (200, 404):
            self._error(f"GET {path}: HTTP {resp.status}")
            return None
        return resp

    def _poll(self) -> PreemptionNotice | None:
        errors_before = self.errors
        resp = self._get(self.ACTION_PATH)
        if resp is not None and resp.status == 200:
            return self._action_notice(resp.body)
        if self.errors != errors_before:
            return None  # the first GET failed: don't spend a second timeout
        if self.check_rebalance:
            resp = self._get(self.REBALANCE_PATH)
            if resp is not None and resp.status == 200:
                return PreemptionNotice(self.cloud, "rebalance", None, self.clock(), resp.body)
        return None

    def _action_notice(self, body: str) -> PreemptionNotice:
        action, at = "unknown", None
        try:
            data = loads_json(body, "instance-action", "instance-action answer")
        except (ValueError, InputError):  # not JSON, or nested too deeply: still a notice (below)
            data = None
        if isinstance(data, dict):
            if isinstance(data.get("action"), str) and data["action"]:
                action = data["action"].lower()
            at = _parse_time(data.get("time"))
        else:
            log.warning("unparseable spot instance-action body %r; treating it as a notice", body[:200])
        return PreemptionNotice(self.cloud, action, at, self.clock(), body)


class GcpNoticeSource(NoticeSource):
    """GCE preemption (``instance/preempted``) and host-maintenance notices.

    Preemption is final: once ``TRUE`` is read, the same notice (``at`` = first seen +
    ``grace_s``) is returned by every later poll without asking the server again.

    With ``wait_for_change=True`` the first poll reads the value (and its ETag) at once; later
    polls long-poll ``?wait_for_change=true&timeout_sec=wait_timeout_s&last_etag=...`` as Google
    recommends, so a poll may block up to ``wait_timeout_s`` (GCP wants whole seconds; tests may
    shrink it) -- a watcher's ``stop()`` then waits for the poll in progress.  The
    maintenance-event is read (without waiting) only on polls that did not long-poll.
    """

    cloud = "gcp"
    PREEMPTED_PATH = "/computeMetadata/v1/instance/preempted"
    MAINTENANCE_PATH = "/computeMetadata/v1/instance/maintenance-event"
    HEADERS = {"Metadata-Flavor": "Google"}

    def __init__(self, base_url: str = DEFAULT_METADATA_URL, timeout: float = 1.0, *,
                 clock: Callable[[], float] = time.time, wait_for_change: bool = False,
                 wait_timeout_s: float = 30.0, grace_s: float = 30.0,
                 check_maintenance: bool = True) -> None:
        super().__init__(base_url, timeout, clock)
        self.wait_for_change = wait_for_change
        self.wait_timeout_s = _positive("wait_timeout_s", wait_timeout_s)
        self.grace_s = float(grace_s)
        self.check_maintenance = check_maintenance
        self._etag: str | None = None
        self._preempted: PreemptionNotice | None = None

    def _get(self, path: str, *, wait: bool = False) -> _Response:
        url, timeout = self.base_url + path, self.timeout
        if wait:
            query = {"wait_for_change": "true", "timeout_sec": f"{self.wait_timeout_s:g}",
                     "last_etag": self._etag or ""}
            url += "?" + urllib.parse.urlencode(query)
            timeout = self.wait_timeout_s + self.timeout
        return _request("GET", url, dict(self.HEADERS), timeout)

    def _poll(self) -> PreemptionNotice | None:
        if self._preempted is not None:
            return self._preempted
        waited = self.wait_for_change and self._etag is not None
        resp = self._get(self.PREEMPTED_PATH, wait=waited)
        if resp.status != 200:
            if waited:
                self._etag = None  # e.g. a stale ETag refused: next poll starts afresh
            raise _Unreachable(f"GET {self.PREEMPTED_PATH}: HTTP {resp.status}")
        self._etag = resp.headers.get("etag") if self.wait_for_change else None
        value = resp.body.strip().upper()
        if value == "TRUE":
            now = self.clock()
            self._preempted = PreemptionNotice(self.cloud, "preempted", now + self.grace_s, now, resp.body)
            return self._preempted
        if value != "FALSE":
            raise _Unreachable(f"GET {self.PREEMPTED_PATH}: unexpected body {resp.body[:80]!r}")
        if self.check_maintenance and not waited:
            resp = self._get(self.MAINTENANCE_PATH)
            if resp.status == 200:
                event = resp.body.strip()
                if event and event.upper() != "NONE":
                    return PreemptionNotice(self.cloud, "maintenance", None, self.clock(), event)
            elif resp.status != 404:  # 404: the VM has no maintenance-event key
                raise _Unreachable(f"GET {self.MAINTENANCE_PATH}: HTTP {resp.status}")
        return None


#: Registry of sources by cloud name.
NOTICE_SOURCES: dict[str, type[NoticeSource]] = {"aws": AwsNoticeSource, "gcp": GcpNoticeSource}


def make_notice_source(cloud: str, **kw) -> NoticeSource:
    """The notice source for ``cloud`` (``"aws"`` or ``"gcp"``, case-insensitive); ``kw`` go to
    its constructor (``base_url``, ``timeout``, ...)."""
    name = cloud.strip().lower() if isinstance(cloud, str) else cloud
    if name not in NOTICE_SOURCES:
        raise InputError(f"unknown cloud {cloud!r}",
                         "valid names are: " + ", ".join(sorted(NOTICE_SOURCES)), "cloud")
    return NOTICE_SOURCES[name](**kw)


def _probe_gcp(url: str, timeout: float) -> bool:
    resp = _request("GET", url.rstrip("/") + "/computeMetadata/v1/instance/id",
                    {"Metadata-Flavor": "Google"}, timeout)
    return resp.status == 200 and resp.headers.get("metadata-flavor", "").lower() == "google"


def _probe_aws(url: str, timeout: float) -> bool:
    base = url.rstrip("/")
    resp = _request("PUT", base + AwsNoticeSource.TOKEN_PATH,
                    {AwsNoticeSource.TTL_HEADER: "60"}, timeout)
    if resp.status == 200 and resp.body.strip():
        return True
    if resp.status in (403, 404, 405):  # IMDSv2 unavailable: try IMDSv1
        return _request("GET", base + "/latest/meta-data/instance-id", {}, timeout).status == 200
    return False


def detect_cloud(timeout: float = 0.3, aws_url: str = DEFAULT_METADATA_URL,
                 gcp_url: str = DEFAULT_METADATA_URL) -> str | None:
    """``"gcp"``, ``"aws"`` or None: which cloud's metadata service answers.

    Both probes run concurrently, so this takes at most about ``2 * timeout`` (the AWS probe may
    need two requests).  GCP is recognised by the ``Metadata-Flavor: Google`` answer header and
    wins if both answer; AWS by an IMDSv2 token (or, failing that, an IMDSv1 instance-id).
    """
    timeout = _positive("timeout", timeout)

    def safe(probe: Callable[[str, float], bool], url: str) -> bool:
        try:
            return probe(url, timeout)
        except _Unreachable:
            return False

    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="spotwise-detect-cloud") as pool:
        gcp = pool.submit(safe, _probe_gcp, gcp_url)
        aws = pool.submit(safe, _probe_aws, aws_url)
        if gcp.result():
            return "gcp"
        if aws.result():
            return "aws"
    return None


# --------------------------------------------------------------------------------------------
# Watcher


class NoticeWatcher:
    """Poll ``source`` every ``interval_s`` on a daemon thread; call ``on_notice`` once per
    distinct notice (identity :attr:`PreemptionNotice.key`, i.e. ignoring ``received``).

    The first poll happens at once on :meth:`start`.  Delivery is at most once: a notice is marked
    seen before ``on_notice`` runs, so a callback that raises is not retried.  Nothing raises out
    of the thread: exceptions from the source or the callback are logged and counted in
    ``poll_failures`` / ``callback_failures``.  ``clock`` stamps :attr:`last_poll_at`; waiting
    uses a monotonic event so :meth:`stop` wakes the thread at once (it then waits for the poll in
    progress, at most ``join_timeout_s``).
    """

    def __init__(self, source: NoticeSource, on_notice: Callable[[PreemptionNotice], None],
                 interval_s: float = 5.0, clock: Callable[[], float] = time.time, *,
                 join_timeout_s: float = 5.0, name: str = "spotwise-notice-watcher") -> None:
        if not callable(on_notice):
            raise InputError(f"on_notice must be callable, got {on_notice!r}",
                             "pass a function taking a PreemptionNotice", "on_notice")
        self.source = source
        self.on_notice = on_notice
        self.interval_s = _positive("interval_s", interval_s)
        self.join_timeout_s = float(join_timeout_s)
        self.clock = clock
        self.name = name
        self.notices: list[PreemptionNotice] = []
        self.poll_failures = 0
        self.callback_failures = 0
        self.last_poll_at: float | None = None
        self._seen: set[tuple] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def errors(self) -> int:
        """The source's network error count (see :attr:`NoticeSource.errors`)."""
        return getattr(self.source, "errors", 0)

    def poll_once(self) -> PreemptionNotice | None:
        """Poll now; deliver and return the notice if it is new, else None. Never raises."""
        try:
            notice = self.source.poll()
        except Exception:  # noqa: BLE001 -- the watcher must survive any source bug
            self.poll_failures += 1
            log.exception("preemption-notice poll failed (%r)", self.source)
            return None
        finally:
            self.last_poll_at = self.clock()
        if notice is None:
            return None
        with self._lock:
            if notice.key in self._seen:
                return None
            self._seen.add(notice.key)
            self.notices.append(notice)
        log.warning("preemption notice: %s %s at=%s", notice.cloud, notice.action, notice.at)
        try:
            self.on_notice(notice)
        except Exception:  # noqa: BLE001
            self.callback_failures += 1
            log.exception("on_notice callback failed for %r", notice)
        return notice

    def _run(self) -> None:
        while not self._stop.is_set():
            self.poll_once()
            if self._stop.wait(self.interval_s):
                break

    def start(self) -> NoticeWatcher:
        """Start the polling thread (no-op if already running)."""
        if self.running:
            return self
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float | None = None) -> bool:
        """Stop polling; True if the thread ended within ``timeout`` (default ``join_timeout_s``)."""
        self._stop.set()
        thread = self._thread
        if thread is None:
            return True
        thread.join(self.join_timeout_s if timeout is None else timeout)
        if thread.is_alive():
            log.warning("notice watcher thread still busy after stop() (a long poll in progress?)")
            return False
        self._thread = None
        return True

    def __enter__(self) -> NoticeWatcher:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
