"""globelog's Python client of the write proxies: async first, with a thin synchronous wrapper.

    async with ProxyClient(["https://127.0.0.1:8101"], namespace="default") as client:
        written = await client.write("orders", b"payload")     # Acked(dlsn, txid, seq)
        acked = await client.write_bulk("orders", [b"a", b"b"])

Routing: a stream's first request goes to its home on a hash ring over the given proxies of
the client's region (the proxies agree on homes, so this is usually the owner); redirects are
followed and the proxy that finally answered is remembered as the stream's owner. A request
that fails with a retriable code is retried with backoff until `deadline_s` (past a quota,
after the proxy's Retry-After); the error of the
last try is raised otherwise, as the library's class for the proxy's code (core/errors.py's
table: `StreamNotFoundError`, `SeqMismatchError`, ...), or a `ProxyError` carrying a code that
table does not know.

Writes follow the answers' outcomes (docs/http-api.md, "Errors"). An error raised for a write
means it was not written, except `OutcomeUnknownError`: it may have been. A plain write (or a
conditional one) whose answer is indefinite (`outcome_unknown`, `internal`, or no answer after
it was sent) is not retried: it raises `OutcomeUnknownError` at once, since a retry could
append it twice. An idempotent write is retried through indefinite answers until it is
acknowledged (a retry of one that landed is answered with where) or `deadline_s` passes; then
it raises `OutcomeUnknownError` if any try's answer was indefinite, else the last error.
"""

from __future__ import annotations

import asyncio
import enum
import json
import ssl
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlsplit

import aiohttp
from opentelemetry import propagate
from uhashring import HashRing

from core import runtime
from core.answers import PROXY_HEADER, UNKNOWN, answer_of
from core.dlsn import DLSN
from core.errors import (
    GlobelogError,
    MetadataUnavailableError,
    OutcomeUnknownError,
    ProxyError,
    ProxyUnreachableError,
    QuotaExceededError,
    SessionExpiredError,
    answered_error,
)
from core.security.credentials import TokenSource, client_ssl
from region.bodies.batches import CONTENT_TYPE, encode_batch

BACKOFF_FIRST_S = 0.05
BACKOFF_MAX_S = 0.5
DOWN_FOR_S = 5.0  # a proxy that did not answer is passed over this long
CUT_OFF_ERRORS = (MetadataUnavailableError, SessionExpiredError)  # the proxy has no ZooKeeper
T = TypeVar("T")
REDIRECTS_MAX = 3
# A stalled proxy (paused, frozen) is noticed within SILENCE_S + PROBE_S of its silence: below
# the proxies' ZooKeeper session timeout in the local cluster (1.5 s), so the client is at
# another proxy, naming the owner unreachable, by the time the owner's session ends.
SILENCE_S = 0.5
PROBE_S = 1.0
RETRY_AFTER_MAX_S = 60.0  # a proxy's Retry-After is waited at most this long at a time


@dataclass(frozen=True, slots=True)
class Acked:
    dlsn: DLSN
    txid: int
    seq: int
    duplicate: bool = False  # an idempotent write that had landed before: where it landed


class ProxyClient:
    def __init__(
        self,
        proxies: Sequence[str],
        namespace: str = "default",
        deadline_s: float = 30.0,
        request_timeout_s: float = 30.0,
        token: str | None = None,
        tls: ssl.SSLContext | bool | None = None,
        silence_s: float = SILENCE_S,
        probe_s: float = PROBE_S,
        connector: Callable[[], aiohttp.BaseConnector] | None = None,
    ) -> None:
        """`token`: sent with every request; `tls`: what HTTPS proxies are verified with. By
        default the environment's (core/security/credentials.py). A proxy that says nothing
        about a request for `silence_s` is probed, and abandoned (as unreachable) unless it
        answers the probe within `probe_s`. `connector`: makes the HTTP connector (the
        simulation's dials its simulated network); by default aiohttp's TCP one."""
        if not proxies:
            raise ValueError("ProxyClient needs at least one proxy URL, got none")
        if not (silence_s > 0 and probe_s > 0):
            raise ValueError(f"silence_s {silence_s}, probe_s {probe_s}: expected seconds > 0")
        self.silence_s = silence_s
        self.probe_s = probe_s
        self._probes: dict[str, asyncio.Future[bool]] = {}  # proxy -> its probe in flight
        self._tokens = TokenSource(token) if token is not None else TokenSource.default()
        self._tls = tls if tls is not None else client_ssl()
        self.namespace = namespace
        self.deadline_s = deadline_s
        self._ring = HashRing(nodes=[p.rstrip("/") for p in proxies])
        self._owners: dict[str, str] = {}  # stream -> the proxy that last served its writes
        self._down: dict[str, float] = {}  # proxy -> until when it is passed over
        self._names: dict[str, str] = {}  # proxy -> its name@region, from redirects to it
        self._unreachable: dict[str, str] = {}  # stream -> the owner this client could not reach
        self._sessions: dict[str, int] = {}  # stream -> this client's write session
        self._served_by: dict[str, str] = {}  # stream -> the proxy that answered it last
        self._timeout = aiohttp.ClientTimeout(total=request_timeout_s)
        self._http: aiohttp.ClientSession | None = None
        self._connector = connector
        self._rng = runtime.new_rng()

    async def __aenter__(self) -> ProxyClient:
        connector = (
            aiohttp.TCPConnector(ssl=self._tls) if self._connector is None else self._connector()
        )
        self._http = aiohttp.ClientSession(timeout=self._timeout, connector=connector)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()

    # --------------------------------------------------------------------------- calls

    async def list_streams(self) -> list[str]:
        if self._http is None:
            raise RuntimeError("use `async with ProxyClient(...)` before calling it")
        proxy = str(self._ring.get_node(self.namespace))
        body = await self._try("GET", proxy, f"/v1/namespaces/{self.namespace}/streams", "", {})
        if isinstance(body, GlobelogError):
            raise body
        return [str(name) for name in body["streams"]]

    async def create(self, stream: str) -> None:
        await self._call("PUT", stream, "")

    async def truncate(self, stream: str, to: DLSN) -> dict[str, Any]:
        return dict(await self._call("POST", stream, "/truncate", params={"to": str(to)}))

    async def delete(self, stream: str) -> dict[str, Any]:
        return dict(await self._call("DELETE", stream, ""))

    async def describe(self, stream: str) -> dict[str, Any]:
        return dict(await self._call("GET", stream, ""))

    async def write(
        self,
        stream: str,
        payload: bytes,
        txid: int | None = None,
        expected_seq: int | None = None,
        producer: tuple[int, int] | None = None,
    ) -> Acked:
        """Appends one record; with `expected_seq`, only if it lands at that sequence id
        (SeqMismatchError otherwise); with `producer` (producer id, producer seq),
        at most once however often it is retried (see `Producer`)."""
        params = self._session_params(stream)
        if producer is not None:
            params["producer"], params["producer_seq"] = str(producer[0]), str(producer[1])
        if txid is not None:
            params["txid"] = str(txid)
        if expected_seq is not None:
            params["expected_seq"] = str(expected_seq)
        write = Write.IDEMPOTENT if producer is not None else Write.PLAIN
        body = await self._call(
            "POST", stream, "/records", data=payload, params=params, write=write
        )
        return _acked(body)

    async def write_bulk(
        self, stream: str, payloads: Sequence[bytes], producer: tuple[int, int] | None = None
    ) -> list[Acked]:
        """Appends the records in order; with `producer` (producer id, seq of the first
        record; the others follow it), each at most once however often it is retried."""
        headers = {"Content-Type": CONTENT_TYPE}
        data = encode_batch(payloads)
        params = self._session_params(stream)
        if producer is not None:
            params["producer"], params["producer_seq"] = str(producer[0]), str(producer[1])
        write = Write.IDEMPOTENT if producer is not None else Write.PLAIN
        body = await self._call(
            "POST", stream, "/bulk", data=data, headers=headers, params=params, write=write
        )
        return [_acked(r) for r in body["records"]]

    async def producer_last_seq(self, stream: str, producer_id: int) -> int | None:
        """The highest seq of the idempotent producer that landed in the stream (None when
        the stream does not know the producer): a producer writing its seqs in order resumes
        after it."""
        body = await self._call("GET", stream, f"/producers/{producer_id}")
        last = body.get("last_seq")
        return None if last is None else int(last)

    def producer(self, stream: str, producer_id: int | None = None, first_seq: int = 0) -> Producer:
        """An idempotent producer of `stream`: a random producer id unless one is given (give
        the same id and the next seq to go on after a restart)."""
        return Producer(self, stream, producer_id, first_seq)

    async def start_session(self, stream: str, exclusive: bool = False) -> int:
        """Starts session writes to `stream`: the owner writes a session marker, which fences
        every earlier session (this client's and others'); later writes of this client carry
        the new session id and fail with `session_fenced` once a newer session exists (a new
        owner starts one on takeover). An `exclusive` session also refuses every write that
        carries no session, until a newer session replaces it."""
        params = {"exclusive": "1" if exclusive else "0"}
        body = await self._call("POST", stream, "/session", params=params)
        session = int(body["session"])
        self._sessions[stream] = session
        return session

    def _session_params(self, stream: str) -> dict[str, str]:
        session = self._sessions.get(stream)
        return {} if session is None else {"session": str(session)}

    async def heartbeat(self, stream: str) -> dict[str, Any]:
        """A control record through the owner (with this client's session, if any): what was
        acknowledged before it is readable everywhere; the answer names the current session."""
        params = self._session_params(stream)
        return dict(await self._call("POST", stream, "/heartbeat", params=params))

    async def last_dlsn(self, stream: str) -> DLSN | None:
        body = await self._call("GET", stream, "/last")
        return None if body["dlsn"] is None else DLSN.parse(body["dlsn"])

    def served_by(self, stream: str) -> str | None:
        """The write proxy (name@region) that answered this client's last successful request
        on `stream`, as it named itself; None before one did."""
        return self._served_by.get(stream)

    # ------------------------------------------------------------------------ plumbing

    def _proxy_for(self, stream: str) -> str:
        """The stream's known owner, else its first proxy on the ring not recently down."""
        owner = self._owners.get(stream)
        if owner is not None:
            return owner
        now = runtime.monotonic()
        candidates = [str(p["nodename"]) for p in self._ring.range(f"{self.namespace}/{stream}")]
        up = [p for p in candidates if self._down.get(p, 0.0) <= now]
        return (up or candidates)[0]

    async def _call(
        self, method: str, stream: str, suffix: str, write: Write | None = None, **kwargs: Any
    ) -> Any:
        if self._http is None:
            raise RuntimeError("use `async with ProxyClient(...)` before calling it")
        deadline = runtime.monotonic() + self.deadline_s
        backoff = BACKOFF_FIRST_S
        path = f"/v1/namespaces/{self.namespace}/streams/{stream}{suffix}"
        unknown: GlobelogError | None = None  # a write's first indefinite answer
        while True:
            proxy = self._proxy_for(stream)
            error = await self._try(method, proxy, path, stream, kwargs)
            if not isinstance(error, GlobelogError):
                return error
            self._owners.pop(stream, None)  # ask the ring (or be redirected) afresh
            if write is not None and unknown is None and indefinite(error):
                unknown = error
                if write is Write.PLAIN:  # a retry could append it twice
                    raise outcome_unknown(f"{method} {path}", unknown, error)
            if not error.retriable or runtime.monotonic() + backoff > deadline:
                if unknown is not None:
                    raise outcome_unknown(f"{method} {path}", unknown, error)
                raise error
            if isinstance(error, QuotaExceededError):  # the proxy says when: wait that long
                if runtime.monotonic() + error.retry_after_s > deadline:
                    raise error
                await asyncio.sleep(error.retry_after_s)
                continue
            await asyncio.sleep(backoff * self._rng.uniform(0.5, 1.0))
            backoff = min(backoff * 2, BACKOFF_MAX_S)

    async def _try(
        self, method: str, proxy: str, path: str, stream: str, kwargs: dict[str, Any]
    ) -> Any:
        """One request, following redirects itself (so a dead owner is the one marked
        down); the answer's body, or the error to retry or raise."""
        assert self._http is not None
        url = proxy + path
        unreachable = self._unreachable.get(stream)
        if unreachable is not None:
            # The proxies queue for the lock of an owner the client could not reach and take
            # the stream as soon as the owner's session ends, instead of redirecting back to it.
            kwargs = {
                **kwargs,
                "params": {**kwargs.get("params", {}), "unreachable_owner": unreachable},
            }
        carrier: dict[str, str] = {}
        propagate.inject(carrier)  # the caller's trace (W3C traceparent), when it has one
        # the token as of now: one renewed in its file is sent from the next request on
        headers = {**self._tokens.headers(), **kwargs.get("headers", {}), **carrier}
        kwargs = {**kwargs, "headers": headers}
        for _ in range(REDIRECTS_MAX + 1):
            try:
                status, answer_headers, body = await self._unless_silent(
                    proxy, self._exchange(method, url, kwargs)
                )
                name = answer_headers.get(PROXY_HEADER)
                if name:
                    self._names[proxy] = name
                if status == 307:
                    target = urlsplit(answer_headers["Location"])
                    if urlsplit(url).scheme == "https" and target.scheme != "https":
                        # the token never goes in clear text, wherever a redirect points
                        raise ProxyError(
                            "redirect_refused",
                            f"{method} {url} redirected to {target.geturl()!r}, which is "
                            "not HTTPS: not followed",
                            False,
                            307,
                        )
                    url = target.geturl()
                    proxy = f"{target.scheme}://{target.netloc}"
                    self._owners[stream] = proxy
                    if isinstance(body.get("owner"), str):
                        self._names[proxy] = body["owner"]
                    continue
                if status < 300:
                    self._unreachable.pop(stream, None)
                    if stream and method == "POST":  # a stream's POSTs are its owner's
                        self._owners[stream] = proxy
                    if name and stream:
                        self._served_by[stream] = name
                    return body
                error = proxy_error(body, status, f"{method} {url}")
                if isinstance(error, QuotaExceededError):
                    error.retry_after_s = retry_after_s(answer_headers.get("Retry-After"))
                if isinstance(error, CUT_OFF_ERRORS):
                    # The proxy answers but has no ZooKeeper: its region is cut off.
                    # Another region's proxy can take the stream; pass this one over, and
                    # name it to the next proxy, which would otherwise send the client back
                    # to it for as long as its lock outlives its session.
                    self._down[proxy] = runtime.monotonic() + DOWN_FOR_S
                    self._name_unreachable(proxy, stream)
                return error
            except (aiohttp.ClientError, TimeoutError, json.JSONDecodeError, KeyError) as err:
                self._down[proxy] = runtime.monotonic() + DOWN_FOR_S
                self._name_unreachable(proxy, stream)
                # Only a connection never made is known not to have carried the request.
                sent = not isinstance(err, aiohttp.ClientConnectorError)
                return ProxyUnreachableError(f"{method} {url}: {type(err).__name__}: {err}", sent)
        return ProxyError(
            "redirect_loop", f"{method} {path}: over {REDIRECTS_MAX} redirects", True, 307
        )

    def _name_unreachable(self, proxy: str, stream: str) -> None:
        name = self._names.get(proxy)
        if name is not None and stream:
            self._unreachable[stream] = name

    async def _exchange(
        self, method: str, url: str, kwargs: dict[str, Any]
    ) -> tuple[int, Mapping[str, str], Any]:
        assert self._http is not None
        async with self._http.request(method, url, allow_redirects=False, **kwargs) as answer:
            # (the headers as aiohttp has them: their names match in any case)
            return answer.status, answer.headers, await answer.json(content_type=None)

    async def _unless_silent(self, proxy: str, exchange: Awaitable[T]) -> T:
        """`exchange`'s result, unless `proxy` stops answering: once it has said nothing for
        `silence_s`, a probe on another connection must be answered within `probe_s`, or the
        exchange is abandoned with ProxySilentError. A stalled process (paused, or a
        machine that froze) holds its connections open and answers nothing, so without
        this the client would wait out its whole request timeout; a slow but live proxy
        answers the probe, and the exchange goes on."""
        task = asyncio.ensure_future(exchange)
        try:
            while True:
                done, _ = await asyncio.wait({task}, timeout=self.silence_s)
                if done:
                    return task.result()
                if not await self._answers(proxy):
                    raise ProxySilentError(
                        f"{proxy} answered nothing for {self.silence_s:.1f} s, nor a probe "
                        f"within {self.probe_s:.1f} s"
                    )
        finally:
            if not task.done():
                task.cancel()
                await asyncio.wait({task})

    async def _answers(self, proxy: str) -> bool:
        """Whether `proxy` answers a probe (any HTTP answer) within `probe_s`; one probe at a
        time per proxy, shared by the requests waiting on it."""
        probe = self._probes.get(proxy)
        if probe is None:
            probe = asyncio.ensure_future(self._probe(proxy))
            self._probes[proxy] = probe
            probe.add_done_callback(lambda _: self._probes.pop(proxy, None))
        return await asyncio.shield(probe)

    async def _probe(self, proxy: str) -> bool:
        assert self._http is not None
        try:
            async with (
                asyncio.timeout(self.probe_s),
                self._http.get(f"{proxy}/v1/health", headers=self._tokens.headers()) as answer,
            ):
                await answer.read()
                return True  # any answer: the process is alive, whatever it said
        except (aiohttp.ClientError, TimeoutError):
            return False


class ProxySilentError(TimeoutError):
    """A proxy that held a request without a word, and answered no probe either."""


class Producer:
    """Idempotent writes to one stream: every write carries this producer's id and the next
    producer seq, so a write retried after a timeout, a redirect or an owner failover lands
    at most once; a retry of one that had landed is answered with where (`duplicate`).

    Writes of one producer are numbered in call order; a write that fails for good leaves a
    gap, which is allowed. The owner remembers each producer's last writes (docs/http-api.md).
    """

    def __init__(
        self, client: ProxyClient, stream: str, producer_id: int | None, first_seq: int
    ) -> None:
        self.client = client
        self.stream = stream
        self.producer_id = runtime.new_rng().getrandbits(63) if producer_id is None else producer_id
        self.next_seq = first_seq

    async def write(self, payload: bytes) -> Acked:
        seq, self.next_seq = self.next_seq, self.next_seq + 1
        return await self.client.write(self.stream, payload, producer=(self.producer_id, seq))

    async def write_bulk(self, payloads: Sequence[bytes]) -> list[Acked]:
        first, self.next_seq = self.next_seq, self.next_seq + len(payloads)
        return await self.client.write_bulk(
            self.stream, payloads, producer=(self.producer_id, first)
        )


def retry_after_s(header: str | None) -> float:
    """Seconds from a Retry-After header (whole seconds; 1 when absent or not a number)."""
    try:
        return min(max(float(header or 1), 0.0), RETRY_AFTER_MAX_S)
    except ValueError:
        return 1.0


def proxy_error(body: dict[str, Any], status: int, request: str) -> GlobelogError:
    """The error a proxy answered `request` with (its JSON body and HTTP status), as the
    library's class for its code, or a ProxyError for a code the table does not know."""
    code = str(body.get("code", "internal"))
    message = str(body.get("message", json.dumps(body)))
    retriable = bool(body.get("retriable"))
    error = answered_error(code, message, retriable)
    if error is None:
        return ProxyError(code, message, retriable, status)
    if isinstance(error, OutcomeUnknownError):
        error.cause = str(body.get("cause", ""))
    error.add_note(f"answered to {request} with HTTP {status}")
    return error


class Write(enum.Enum):
    """What a request writes, for how its indefinite answers are handled (module doc)."""

    PLAIN = "plain"
    IDEMPOTENT = "idempotent"


def indefinite(error: GlobelogError) -> bool:
    """Whether a request that got `error` may have taken effect (docs/http-api.md)."""
    if isinstance(error, ProxyUnreachableError):
        return error.maybe_sent
    answer = answer_of(error.code)
    return answer is None or answer.outcome == UNKNOWN  # a code outside the table: unknown


def outcome_unknown(request: str, first: GlobelogError, last: GlobelogError) -> OutcomeUnknownError:
    """A write's error once an answer to it was indefinite: `first` such answer, `last` the
    one it ends on."""
    if first is last and isinstance(first, OutcomeUnknownError):
        return first
    cause = first.cause if isinstance(first, OutcomeUnknownError) else first.code
    message = f"{request} may have been appended: {first.code}: {first}"
    if last is not first:
        message += f"; the last try: {last.code}: {last}"
    error = OutcomeUnknownError(message, cause)
    error.__cause__ = last
    return error


def _acked(body: dict[str, Any]) -> Acked:
    return Acked(
        DLSN.parse(body["dlsn"]), int(body["txid"]), int(body["seq"]), bool(body.get("duplicate"))
    )
