"""Preemption-notice sources and watcher, against a fake AWS/GCP metadata server on loopback.

No test contacts anything but 127.0.0.1: an autouse fixture makes any other outgoing
connection fail the test.
"""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from _load import bound
from spotwise.errors import InputError
from spotwise.capacity import notice as notice_mod
from spotwise.capacity.notice import (
    DEFAULT_METADATA_URL,
    AwsNoticeSource,
    GcpNoticeSource,
    NoticeSource,
    NoticeWatcher,
    PreemptionNotice,
    detect_cloud,
    make_notice_source,
)

pytestmark = pytest.mark.timeout(10)

ACTION = {"action": "terminate", "time": "2017-09-18T08:22:00Z"}
ACTION_AT = 1505722920.0  # 2017-09-18T08:22:00Z


# --------------------------------------------------------------------------------------------
# fake metadata server


class FakeMetadata:
    """Mimics the AWS (IMDSv1/v2) and GCP metadata services; tests flip its attributes."""

    def __init__(self) -> None:
        self.aws = True
        self.imds_v2 = True  # PUT /latest/api/token works
        self.v2_enforced = True  # GETs without a valid token get 401
        self.token_status = 405  # answer to the PUT when imds_v2 is False
        self.instance_action: str | None = None  # body, or None for 404
        self.rebalance: str | None = None
        self.aws_status: int | None = None  # force this status on AWS GETs
        self.gcp = True
        self.preempted_body = "FALSE"
        self.maintenance = "NONE"
        self.tokens: set[str] = set()
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        self.cond = threading.Condition()
        self.version = 0  # bumped whenever preempted changes; the GCP ETag

    def set_preempted(self, value: bool | str) -> None:
        with self.cond:
            self.preempted_body = value if isinstance(value, str) else ("TRUE" if value else "FALSE")
            self.version += 1
            self.cond.notify_all()

    def paths(self, method: str | None = None) -> list[str]:
        return [p for m, p, _ in self.requests if method is None or m == method]


def _handler(fake: FakeMetadata):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:  # keep test output quiet
            pass

        def _send(self, status: int, body: str = "", headers: dict[str, str] | None = None) -> None:
            data = body.encode()
            self.send_response(status)
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _record(self) -> urllib.parse.SplitResult:
            url = urllib.parse.urlsplit(self.path)
            fake.requests.append((self.command, self.path, {k.lower(): v for k, v in self.headers.items()}))
            return url

        def do_PUT(self) -> None:
            url = self._record()
            if not fake.aws or url.path != "/latest/api/token":
                return self._send(404)
            if not fake.imds_v2:
                return self._send(fake.token_status)
            ttl = self.headers.get("X-aws-ec2-metadata-token-ttl-seconds")
            if ttl is None:
                return self._send(400, "missing TTL header")
            token = f"tok-{len(fake.tokens)}-{time.monotonic_ns()}"
            fake.tokens.add(token)
            self._send(200, token, {"X-aws-ec2-metadata-token-ttl-seconds": ttl})

        def do_GET(self) -> None:
            url = self._record()
            if url.path.startswith("/computeMetadata/"):
                return self._gcp(url)
            if url.path.startswith("/latest/") and fake.aws:
                return self._aws(url)
            self._send(404)

        def _aws(self, url) -> None:
            token = self.headers.get("X-aws-ec2-metadata-token")
            if token is not None and token not in fake.tokens:
                return self._send(401)
            if token is None and fake.v2_enforced:
                return self._send(401)
            if fake.aws_status is not None:
                return self._send(fake.aws_status)
            bodies = {
                "/latest/meta-data/spot/instance-action": fake.instance_action,
                "/latest/meta-data/events/recommendations/rebalance": fake.rebalance,
                "/latest/meta-data/instance-id": "i-0123456789abcdef0",
            }
            body = bodies.get(url.path)
            self._send(404) if body is None else self._send(200, body)

        def _gcp(self, url) -> None:
            if not fake.gcp:
                return self._send(404)
            if self.headers.get("Metadata-Flavor") != "Google":
                return self._send(403, "Missing Metadata-Flavor:Google header.")
            gh = {"Metadata-Flavor": "Google"}
            q = urllib.parse.parse_qs(url.query)
            if url.path == "/computeMetadata/v1/instance/preempted":
                with fake.cond:
                    if q.get("wait_for_change") == ["true"]:
                        last = q.get("last_etag", [""])[0]
                        timeout = float(q.get("timeout_sec", ["60"])[0])
                        if last == str(fake.version):
                            fake.cond.wait_for(lambda: str(fake.version) != last, timeout)
                    body, etag = fake.preempted_body, str(fake.version)
                return self._send(200, body, {**gh, "ETag": etag})
            if url.path == "/computeMetadata/v1/instance/maintenance-event":
                return self._send(200, fake.maintenance, gh)
            if url.path == "/computeMetadata/v1/instance/id":
                return self._send(200, "1234567890", gh)
            self._send(404, "", gh)

    return Handler


@pytest.fixture(autouse=True)
def loopback_only(monkeypatch):
    """Fail any attempt to open a connection to anything but loopback."""
    real = socket.create_connection

    def guarded(address, *args, **kw):
        host = address[0]
        assert host in ("127.0.0.1", "localhost"), f"test tried to contact {host}"
        return real(address, *args, **kw)

    monkeypatch.setattr(socket, "create_connection", guarded)


@pytest.fixture()
def fake():
    state = FakeMetadata()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield state
    finally:
        with state.cond:  # release any long-poll handler
            state.version += 1
            state.cond.notify_all()
        server.shutdown()
        server.server_close()
        thread.join(2)


@pytest.fixture()
def dead_url():
    """A loopback URL on which nothing listens (connection refused)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"http://127.0.0.1:{port}"


class FakeClock:
    def __init__(self, t: float = 1_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def raw_get(url: str, headers: dict[str, str] | None = None) -> int:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(urllib.request.Request(url, headers=headers or {}), timeout=2) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


# --------------------------------------------------------------------------------------------
# the fake itself enforces what the real services enforce


def test_fake_enforces_imdsv2_token_and_gcp_header(fake):
    assert raw_get(fake.url + "/latest/meta-data/spot/instance-action") == 401
    assert raw_get(fake.url + "/latest/meta-data/spot/instance-action",
                   {"X-aws-ec2-metadata-token": "forged"}) == 401
    assert raw_get(fake.url + "/computeMetadata/v1/instance/preempted") == 403
    assert raw_get(fake.url + "/computeMetadata/v1/instance/preempted", {"Metadata-Flavor": "Google"}) == 200


# --------------------------------------------------------------------------------------------
# AWS


def test_aws_no_notice_then_terminate(fake):
    src = AwsNoticeSource(fake.url, timeout=bound(1.0))
    assert src.poll() is None
    assert src.poll() is None
    fake.instance_action = json.dumps(ACTION)
    n = src.poll()
    assert n is not None
    assert (n.cloud, n.action, n.at, n.raw) == ("aws", "terminate", ACTION_AT, fake.instance_action)
    assert n.imminent
    assert src.errors == 0 and src.reachable
    assert src.imds_version == 2
    # one token for all polls, sent with every GET, with the TTL header on the PUT
    assert src.token_fetches == 1
    puts = [h for m, _, h in fake.requests if m == "PUT"]
    assert len(puts) == 1 and puts[0]["x-aws-ec2-metadata-token-ttl-seconds"] == "21600"
    gets = [h for m, _, h in fake.requests if m == "GET"]
    assert gets and all(h.get("x-aws-ec2-metadata-token") in fake.tokens for h in gets)


def test_aws_token_refreshed_near_expiry(fake):
    clock = FakeClock()
    src = AwsNoticeSource(fake.url, clock=clock, token_ttl_s=100, token_refresh_margin_s=10)
    src.poll()
    clock.t += 89
    src.poll()
    assert src.token_fetches == 1
    clock.t += 2  # within the margin of expiry
    src.poll()
    assert src.token_fetches == 2
    assert src.errors == 0


def test_aws_token_refetched_after_401(fake):
    src = AwsNoticeSource(fake.url)
    assert src.poll() is None
    fake.tokens.clear()  # the service restarted: old tokens are void
    fake.instance_action = json.dumps({"action": "stop", "time": "2017-09-18T08:22:00Z"})
    n = src.poll()
    assert n is not None and n.action == "stop"
    assert src.token_fetches == 2 and src.errors == 0


@pytest.mark.parametrize("status", [403, 404, 405])
def test_aws_imdsv1_fallback(fake, status):
    fake.imds_v2 = False
    fake.v2_enforced = False
    fake.token_status = status
    clock = FakeClock()
    src = AwsNoticeSource(fake.url, clock=clock, v1_retry_s=300)
    assert src.poll() is None
    assert src.imds_version == 1 and src.errors == 0
    fake.instance_action = json.dumps({"action": "hibernate", "time": "2017-09-18T08:22:00Z"})
    n = src.poll()
    assert n is not None and n.action == "hibernate" and n.at == ACTION_AT
    assert fake.paths("PUT") == ["/latest/api/token"]  # not retried within v1_retry_s
    gets = [h for m, _, h in fake.requests if m == "GET"]
    assert all("x-aws-ec2-metadata-token" not in h for h in gets)
    # v2 comes back later: after v1_retry_s the token is tried again
    fake.imds_v2 = True
    clock.t += 301
    assert src.poll() is not None
    assert src.imds_version == 2 and len(fake.paths("PUT")) == 2


def test_aws_rebalance_is_an_early_notice(fake):
    src = AwsNoticeSource(fake.url)
    fake.rebalance = json.dumps({"noticeTime": "2020-10-27T08:22:00Z"})
    n = src.poll()
    assert n is not None and n.action == "rebalance" and n.at is None and not n.imminent
    assert json.loads(n.raw)["noticeTime"] == "2020-10-27T08:22:00Z"
    fake.instance_action = json.dumps(ACTION)  # the interruption notice takes precedence
    assert src.poll().action == "terminate"
    assert AwsNoticeSource(fake.url, check_rebalance=False).poll().action == "terminate"
    fake.instance_action = None
    assert AwsNoticeSource(fake.url, check_rebalance=False).poll() is None


@pytest.mark.parametrize("body", ["{not json", "", "[1, 2]", '"terminate"'])
def test_aws_malformed_body_is_a_notice_with_raw_text(fake, body):
    """Documented choice: a 200 on instance-action is a notice even if unparseable."""
    fake.instance_action = body
    n = AwsNoticeSource(fake.url).poll()
    assert n is not None
    assert (n.action, n.at, n.raw) == ("unknown", None, body)
    assert n.imminent


def test_aws_bad_time_keeps_action(fake):
    fake.instance_action = json.dumps({"action": "Terminate", "time": "soon"})
    n = AwsNoticeSource(fake.url).poll()
    assert (n.action, n.at) == ("terminate", None)


def test_aws_unexpected_status_counts_as_error(fake):
    fake.aws_status = 500
    src = AwsNoticeSource(fake.url)
    assert src.poll() is None and src.poll() is None
    assert src.errors == 2 and src.consecutive_errors == 2 and not src.reachable
    assert "500" in src.last_error
    fake.aws_status = None
    assert src.poll() is None
    assert src.errors == 2 and src.reachable


# --------------------------------------------------------------------------------------------
# GCP


def test_gcp_false_then_true(fake):
    clock = FakeClock()
    src = GcpNoticeSource(fake.url, clock=clock, grace_s=30)
    assert src.poll() is None
    fake.set_preempted(True)
    n = src.poll()
    assert (n.cloud, n.action, n.received, n.at, n.raw) == ("gcp", "preempted", clock.t, clock.t + 30, "TRUE")
    # every request carried the header (the fake would have answered 403 otherwise)
    assert all(h.get("metadata-flavor") == "Google" for _, _, h in fake.requests)
    assert src.errors == 0
    # preemption is final: later polls return the same notice without asking again
    count = len(fake.requests)
    clock.t += 5
    assert src.poll() == n
    assert len(fake.requests) == count


def test_gcp_maintenance_event_is_informational(fake):
    fake.maintenance = "TERMINATE_ON_HOST_MAINTENANCE"
    n = GcpNoticeSource(fake.url).poll()
    assert (n.action, n.raw, n.at, n.imminent) == ("maintenance", "TERMINATE_ON_HOST_MAINTENANCE", None, False)
    assert GcpNoticeSource(fake.url, check_maintenance=False).poll() is None


def test_gcp_unexpected_body_or_status_is_an_error(fake):
    fake.set_preempted("maybe")
    src = GcpNoticeSource(fake.url)
    assert src.poll() is None and src.errors == 1
    fake.set_preempted(False)
    fake.gcp = False  # e.g. on AWS: 404
    assert src.poll() is None and src.errors == 2 and "404" in src.last_error


@pytest.mark.timeout(120)
def test_gcp_long_poll_returns_on_change(fake):
    # the poll must end on the change, not at wait_timeout_s: 30 s, half of it is the bound
    src = GcpNoticeSource(fake.url, wait_for_change=True, wait_timeout_s=30)
    assert src.poll() is None  # first poll reads at once, remembering the ETag
    result: list = []
    t = threading.Thread(target=lambda: result.append(src.poll()), daemon=True)
    t0 = time.monotonic()
    t.start()
    time.sleep(0.15)
    assert t.is_alive()  # blocked in the long poll
    fake.set_preempted(True)
    t.join(15)
    assert not t.is_alive() and time.monotonic() - t0 < 15
    assert result[0].action == "preempted"
    waited = [p for p in fake.paths("GET") if "wait_for_change=true" in p]
    assert len(waited) == 1 and "last_etag=0" in waited[0] and "timeout_sec=30" in waited[0]


def test_gcp_long_poll_times_out_without_change(fake):
    src = GcpNoticeSource(fake.url, wait_for_change=True, wait_timeout_s=0.3, timeout=bound(1.0))
    src.poll()
    t0 = time.monotonic()
    assert src.poll() is None
    assert 0.25 < time.monotonic() - t0  # it did wait (load only lengthens it)
    # ended by the server at timeout_sec, not by the client's own timeout (that would be an error)
    assert src.errors == 0
    assert "timeout_sec=0.3" in fake.paths("GET")[-1]


# --------------------------------------------------------------------------------------------
# unreachable service


@pytest.mark.parametrize("cls", [AwsNoticeSource, GcpNoticeSource])
def test_server_down_counts_errors(dead_url, cls):
    src = cls(dead_url, timeout=0.5)
    for _ in range(3):
        assert src.poll() is None
    assert src.errors == 3 and src.consecutive_errors == 3 and not src.reachable
    assert src.last_error


def _bounded(fn, limit_s: float):
    """``fn()`` on a daemon thread; its result, failing if it has not returned within ``limit_s``
    (a hang: the limit is far above the timeouts under test, so load cannot reach it)."""
    out: list = []

    def run():
        try:
            out.append((True, fn()))
        except BaseException as err:  # noqa: BLE001 -- re-raised below
            out.append((False, err))

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(limit_s)
    assert not t.is_alive(), f"still blocked after {limit_s} s"
    ok, value = out[0]
    if not ok:
        raise value
    return value


def _accepted(lsock: socket.socket) -> int:
    """Drain the listener's accept queue: the connections clients opened to it so far."""
    lsock.setblocking(False)
    n = 0
    while True:
        try:
            conn, _ = lsock.accept()
        except BlockingIOError:
            return n
        conn.close()
        n += 1


@pytest.mark.timeout(120)
def test_hanging_server_times_out():
    """A listener that never answers: the poll gives up after one ``timeout`` (one request)."""
    with socket.socket() as lsock:
        lsock.bind(("127.0.0.1", 0))
        lsock.listen(8)
        url = f"http://127.0.0.1:{lsock.getsockname()[1]}"
        for cls in (AwsNoticeSource, GcpNoticeSource):
            src = cls(url, timeout=0.2)
            assert _bounded(src.poll, 60) is None  # 300x the timeout: only a hang fails
            assert src.errors == 1
            assert _accepted(lsock) == 1  # no second request after the first timed out


# --------------------------------------------------------------------------------------------
# watcher


def _wait_for(pred, timeout: float = 3.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.005)
    return pred()


@pytest.mark.parametrize("cloud", ["aws", "gcp"])
def test_watcher_end_to_end(fake, cloud):
    got: list[PreemptionNotice] = []
    called = threading.Event()

    delivered_at: list[int] = []

    def on_notice(n):
        got.append(n)
        delivered_at.append(src.polls)  # the poll that found it (poll() counts on entry)
        called.set()

    src = make_notice_source(cloud, base_url=fake.url, timeout=bound(1.0))
    watcher = NoticeWatcher(src, on_notice, interval_s=0.02)
    with watcher:
        assert watcher.running
        assert _wait_for(lambda: src.polls >= 3)
        assert not got
        polls_at_flip = src.polls
        if cloud == "aws":
            fake.instance_action = json.dumps(ACTION)
        else:
            fake.set_preempted(True)
        assert called.wait(30), "callback not invoked after the flip"
        # delivered by the first poll that started after the flip (counted, not timed)
        assert delivered_at[0] <= polls_at_flip + 1
        polls = src.polls
        assert _wait_for(lambda: src.polls >= polls + 5)  # keep polling: still one delivery
    assert not watcher.running  # stop() ended the thread (promptness: test_watcher_stop_wakes_...)
    assert len(got) == 1 and got[0].cloud == cloud
    assert watcher.notices == got and watcher.errors == 0


def test_watcher_server_down_no_notice(dead_url):
    got = []
    src = AwsNoticeSource(dead_url, timeout=0.2)
    watcher = NoticeWatcher(src, got.append, interval_s=0.02).start()
    try:
        assert _wait_for(lambda: watcher.errors >= 3)
    finally:
        assert watcher.stop()
    assert got == [] and not src.reachable


class ScriptedSource(NoticeSource):
    """Returns (or raises) the scripted items in turn, then the last one forever."""

    cloud = "test"

    def __init__(self, script) -> None:
        super().__init__("http://127.0.0.1:9", timeout=1.0)
        self.script = list(script)

    def _poll(self):
        item = self.script.pop(0) if len(self.script) > 1 else self.script[0]
        if isinstance(item, Exception):
            raise item
        return item


def _n(action: str, received: float, at: float | None = 100.0) -> PreemptionNotice:
    return PreemptionNotice("test", action, at, received, "{}")


def test_watcher_deduplicates_and_delivers_distinct_notices():
    got = []
    src = ScriptedSource([None, _n("rebalance", 1, None), _n("rebalance", 2, None),
                          _n("terminate", 3), _n("terminate", 4)])
    w = NoticeWatcher(src, got.append, interval_s=0.01, clock=FakeClock(5.0))
    for _ in range(6):
        w.poll_once()
    assert [(n.action, n.received) for n in got] == [("rebalance", 1), ("terminate", 3)]
    assert w.last_poll_at == 5.0


def test_watcher_survives_source_and_callback_errors():
    calls = []

    def bad_callback(n):
        calls.append(n)
        raise RuntimeError("callback bug")

    src = ScriptedSource([RuntimeError("source bug"), None, _n("terminate", 1)])
    w = NoticeWatcher(src, bad_callback, interval_s=0.01)
    with w:
        assert _wait_for(lambda: src.polls >= 10)
        assert w.running
    assert w.poll_failures == 1 and w.callback_failures == 1
    assert len(calls) == 1  # at most once, even though the callback raised


@pytest.mark.timeout(120)
def test_watcher_stop_wakes_the_interval_wait():
    """stop() wakes the thread at once rather than after interval_s (30 s; half is the bound)."""
    src = ScriptedSource([None])
    w = NoticeWatcher(src, lambda n: None, interval_s=30, join_timeout_s=60).start()
    assert _wait_for(lambda: src.polls >= 1)
    t0 = time.monotonic()
    assert w.stop() and not w.running
    assert time.monotonic() - t0 < 15
    assert src.polls == 1


def test_watcher_stop_is_idempotent_and_restartable():
    src = ScriptedSource([None])
    w = NoticeWatcher(src, lambda n: None, interval_s=0.01)
    assert w.stop()  # never started
    w.start()
    assert w.start() is w and w.running  # second start is a no-op
    assert w.stop() and not w.running
    w.start()
    assert _wait_for(lambda: src.polls >= 2)
    assert w.stop()


# --------------------------------------------------------------------------------------------
# detection, registry, validation


@pytest.mark.timeout(120)
def test_detect_cloud(fake, dead_url):
    assert detect_cloud(timeout=0.5, aws_url=fake.url, gcp_url=fake.url) == "gcp"
    fake.gcp = False
    assert detect_cloud(timeout=0.5, aws_url=fake.url, gcp_url=fake.url) == "aws"
    fake.imds_v2, fake.v2_enforced = False, False  # IMDSv1 only
    assert detect_cloud(timeout=0.5, aws_url=fake.url, gcp_url=fake.url) == "aws"
    fake.aws = False
    assert detect_cloud(timeout=0.5, aws_url=fake.url, gcp_url=fake.url) is None
    # refused connections end the probes at once: the 30 s timeout is never waited out
    t0 = time.monotonic()
    assert detect_cloud(timeout=30, aws_url=dead_url, gcp_url=dead_url) is None
    assert time.monotonic() - t0 < 15


@pytest.mark.timeout(120)
def test_detect_cloud_times_out_on_silent_listener():
    with socket.socket() as lsock:
        lsock.bind(("127.0.0.1", 0))
        lsock.listen(8)
        url = f"http://127.0.0.1:{lsock.getsockname()[1]}"
        assert _bounded(lambda: detect_cloud(timeout=0.2, aws_url=url, gcp_url=url), 60) is None
        assert _accepted(lsock) == 2  # one request per probe: the AWS PUT, the GCP GET


def test_make_notice_source():
    aws = make_notice_source("aws")
    assert isinstance(aws, AwsNoticeSource) and aws.base_url == DEFAULT_METADATA_URL
    gcp = make_notice_source(" GCP ", base_url="http://127.0.0.1:1/", timeout=0.1)
    assert isinstance(gcp, GcpNoticeSource) and gcp.base_url == "http://127.0.0.1:1" and gcp.timeout == 0.1
    with pytest.raises(InputError) as exc:
        make_notice_source("azure")
    msg = str(exc.value)
    assert "azure" in msg and "aws" in msg and "gcp" in msg and exc.value.where == "cloud"


@pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf"), "5"])
def test_bad_timing_values_are_input_errors(bad):
    with pytest.raises(InputError):
        NoticeWatcher(ScriptedSource([None]), lambda n: None, interval_s=bad)
    with pytest.raises(InputError):
        AwsNoticeSource("http://127.0.0.1:1", timeout=bad)
    with pytest.raises(InputError):
        detect_cloud(timeout=bad)


def test_loopback_guard_blocks_metadata_address():
    """The default address is never contacted in tests: the guard turns it into an error."""
    src = AwsNoticeSource()
    assert src.base_url == "http://169.254.169.254"
    with pytest.raises(AssertionError):
        socket.create_connection(("169.254.169.254", 80), timeout=0.1)
    assert notice_mod.DEFAULT_METADATA_URL == DEFAULT_METADATA_URL
