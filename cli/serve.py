"""`globelog serve write-proxy|read-proxy|rebuilder|console --region R`: one proxy process, until SIGTERM or Ctrl-C.

The proxy's name and port come from topology.yaml (the region's first write proxy unless
--name picks another); it talks to the global ZooKeeper and to the bookies of its region's
view of the WAN, like every client of that region.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import signal
from pathlib import Path

from aiohttp import web

from core.errors import ConfigError
from core.security.credentials import default_token
from core.settings.rebuild_settings import RebuildSettings, flag_type
from core.topology import Endpoint, Proxy, Topology
from global_meta import MetaStore
from global_meta.faults import publish_session
from ledger import LedgerClient, LedgerConfig
from placement import load_checked_topology
from rebuild.service import Rebuilder
from rebuild.telemetry import observe_rebuilder
from region.http_errors import error_middleware
from region.isolation import cut_off_check
from region.observability import telemetry
from region.observability.tracing import install_tracing
from region.ownership import OwnershipConfig
from region.process import event_loop, logs
from region.read_proxy import ReadProxy
from region.registry import ProxyInfo
from region.security.gate import Rule, Rules, require_rules
from region.security.service import ProxySecurity
from region.write_proxy import WriteProxy

# the rebuilder's settings its command line may set over topology.yaml's `rebuild:` section
REBUILD_OVERRIDES = (
    "lost_bookie_delay_s", "check_interval_s", "ledgers_at_once", "rate_bytes_s",
    "rate_min_bytes_s", "yield_delay_s", "shared_pace",
)  # fmt: skip

log = logging.getLogger(__name__)


def add_arguments(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    serve = commands.add_parser("serve", help="run one globelog service process")
    kinds = serve.add_subparsers(dest="kind", required=True)
    write = kinds.add_parser("write-proxy", help="a write proxy of --region")
    write.add_argument("--region", required=True)
    write.add_argument("--name", default=None, help="which of the region's write proxies")
    write.add_argument("--topology", type=Path, default=None)
    write.add_argument("--zk-session-timeout-s", type=float, default=10.0)
    write.add_argument(
        "--session-file",
        type=Path,
        default=None,
        help="keep the ZooKeeper session's id and password here (0600) for failover drills",
    )
    write.add_argument("--no-lock-breaking", action="store_true", help="an unreachable owner's "
        "lock waits for its session even when its port refuses connections (docs/operations.md)")  # fmt: skip
    write.add_argument("--log-format", choices=["json", "text"], default="json")
    _tracing_arguments(write)
    read = kinds.add_parser("read-proxy", help="a read proxy of --region")
    read.add_argument("--region", required=True)
    read.add_argument("--name", default=None, help="which of the region's read proxies")
    read.add_argument("--topology", type=Path, default=None)
    read.add_argument("--zk-session-timeout-s", type=float, default=10.0)
    read.add_argument("--log-format", choices=["json", "text"], default="json")
    _tracing_arguments(read)
    console = kinds.add_parser("console", help="the web console, in --region")
    console.add_argument("--region", required=True)
    console.add_argument("--name", default=None, help="which of the region's consoles")
    console.add_argument("--topology", type=Path, default=None)
    console.add_argument(
        "--listen", default=None, metavar="HOST:PORT", help="default: the topology's address"
    )
    console.add_argument("--zk-session-timeout-s", type=float, default=10.0)
    console.add_argument(
        "--hide-payloads", default="", metavar="NS,...", help="namespaces whose payloads are hidden"
    )
    console.add_argument("--failover-runs", type=Path, default=None, metavar="DIR")
    console.add_argument("--audit-log", type=Path, default=Path("console-audit.jsonl"))
    console.add_argument("--log-format", choices=["json", "text"], default="json")
    rebuilder = kinds.add_parser(
        "rebuilder", help="an auditor candidate and a rebuild worker of --region"
    )
    rebuilder.add_argument("--region", required=True)
    rebuilder.add_argument("--name", default=None, help="default: rebuilder-REGION")
    rebuilder.add_argument("--topology", type=Path, default=None)
    rebuilder.add_argument("--zk-session-timeout-s", type=float, default=10.0)
    rebuilder.add_argument("--log-format", choices=["json", "text"], default="json")
    # each over topology.yaml's `rebuild:` section (docs/operations.md)
    for key in REBUILD_OVERRIDES:
        rebuilder.add_argument(f"--{key.replace('_', '-')}", type=flag_type(key), default=None)
    rebuilder.add_argument(
        "--metrics-address",
        default=None,
        metavar="HOST:PORT",
        help="serve /metrics (Prometheus) and /v1/health (its status) there; default: none",
    )


def _tracing_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--trace-sample",
        type=float,
        default=0.01,
        help="share of requests traced (0..1); a caller's sampled traceparent is always traced",
    )
    parser.add_argument(
        "--trace-file", type=Path, default=None, help="also append finished spans here (JSONL)"
    )


def pick_proxy(topology: Topology, region: str, name: str | None, kind: str = "write") -> Proxy:
    if region not in topology.region_names:
        raise ConfigError(f"--region {region!r}: expected one of {list(topology.region_names)}")
    found = topology.region(region)
    in_region = found.write_proxies if kind == "write" else found.read_proxies
    proxies = [p for p in in_region if name is None or p.name == name]
    if not proxies:
        names = [p.name for p in in_region]
        raise ConfigError(f"--name {name!r}: the {kind} proxies of {region} are {names}")
    return proxies[0]


async def serve_proxy(
    topology: Topology,
    proxy: Proxy,
    kind: str,
    session_timeout_s: float,
    trace_sample: float = 0.01,
    trace_file: Path | None = None,
    session_file: Path | None = None,
    break_locks: bool = True,
) -> None:
    """Runs one proxy (kind "write" or "read") with its own ZooKeeper session and ledger
    client until SIGTERM or SIGINT; then it stops (a write proxy releases its streams)."""
    endpoint = proxy.endpoint
    me = ProxyInfo(proxy.name, proxy.region, topology.proxy_url(proxy))
    replication = topology.replication
    ledger_config = LedgerConfig.of(topology, proxy.region)
    telemetry.install_prometheus(f"globelog-{kind}-proxy", proxy.region, proxy.name)
    install_tracing(f"globelog-{kind}-proxy", proxy.region, proxy.name, trace_sample, trace_file)
    stop = _stop_on_signals()
    async with (
        await MetaStore.of(topology, proxy.region, session_timeout_s=session_timeout_s) as store,
        await LedgerClient.connect(store, ledger_config) as ledgers,
        MetaStore.second_if(kind == "write", topology, proxy.region, session_timeout_s) as reads,
    ):
        # give the session up only when cut off from most regions, not during an election
        store.isolation_check = cut_off_check(lambda: ledgers.published, proxy.region)
        security = ProxySecurity.load(
            topology.security,
            store,
            topology.limits,
            issues=kind == "write",
            host=endpoint.host,
            on_failed=telemetry.follower_restarts(kind, "revocations"),
        )
        server: WriteProxy | ReadProxy = (
            WriteProxy(
                # an unreachable owner's lock goes with its session (the same timeout as ours)
                OwnershipConfig(
                    me,
                    replication,
                    topology.streams,
                    takeover_wait_s=2 * session_timeout_s + 1,
                    lost_bookie_delay_s=topology.rebuild.lost_bookie_delay_s,
                    break_refusing_owners=break_locks,
                ),
                store,
                ledgers,
                topology.limits,
                security,
                reads,
            )
            if kind == "write"
            else ReadProxy(me, store, ledgers, topology.limits, security, 2 * session_timeout_s + 1)
        )
        await server.start(endpoint.host, endpoint.port)
        event_loop.freeze_heap()
        print(f"{kind} proxy {me.name} ({me.region}) serving at {me.url}", flush=True)
        background = event_loop.start_background(
            telemetry.watch_loop_lag(telemetry.PROXY_METRICS.loop_lag.record),
            event_loop.keep_survivors_frozen(),
            *([ledgers.watch_bookies()] if kind == "write" else []),
            *([] if session_file is None else [publish_session(store, session_file)]),
        )
        try:
            await stop.wait()
        finally:
            await event_loop.stop_background(background)
            await server.stop()


def _stop_on_signals() -> asyncio.Event:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    return stop


def _host_port(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"{address!r}: expected HOST:PORT, as 127.0.0.1:9400")
    return host, int(port)


REBUILDER_RULES: Rules = {
    ("GET", "/metrics"): Rule("observe", "proxy"),
    ("GET", "/v1/health"): Rule("observe", "proxy"),
}


def rebuilder_app(rebuilder: Rebuilder, security: ProxySecurity | None) -> web.Application:
    """The rebuilder's own HTTP: its instruments and its last published status, behind the
    same tokens as the proxies' (an `observe` scope)."""

    async def health(_: web.Request) -> web.Response:
        return web.json_response(
            rebuilder.last_status or {"name": rebuilder.name, "starting": True}
        )

    gate = security.middlewares(REBUILDER_RULES) if security else []
    app = web.Application(middlewares=[error_middleware, *gate])
    app.router.add_get("/metrics", telemetry.metrics_handler)
    app.router.add_get("/v1/health", health)
    require_rules(app, REBUILDER_RULES)
    return app


async def serve_rebuilder(
    topology: Topology,
    region: str,
    name: str,
    settings: RebuildSettings,
    session_timeout_s: float,
    metrics_address: str | None = None,
) -> None:
    """Runs one rebuilder until SIGTERM or SIGINT (rebuild/service.py)."""
    if metrics_address is not None:
        telemetry.install_prometheus("globelog-rebuilder", region, name)
    config = LedgerConfig.of(topology, region)
    stop = _stop_on_signals()
    async with (
        await MetaStore.of(topology, region, session_timeout_s=session_timeout_s) as store,
        await LedgerClient.connect(store, config) as ledgers,
    ):
        rebuilder = Rebuilder(store, ledgers, settings, name, region)
        runner = None
        security = None
        if metrics_address is not None:
            observe_rebuilder(rebuilder)
            host, port = _host_port(metrics_address)
            security = ProxySecurity.load(
                topology.security, store, topology.limits, issues=False, host=host
            )
            await security.start()
            runner = web.AppRunner(rebuilder_app(rebuilder, security), access_log=None)
            await runner.setup()
            await web.TCPSite(runner, host, port, ssl_context=security.ssl).start()
        rebuilder.start()
        print(f"rebuilder {name} ({region}) running", flush=True)
        try:
            await stop.wait()
        finally:
            await rebuilder.stop()
            if runner is not None:
                await runner.cleanup()
            if security is not None:
                await security.stop()


def run_rebuilder(args: argparse.Namespace, topology: Topology) -> int:
    if args.region not in topology.region_names:
        raise ConfigError(
            f"--region {args.region!r}: expected one of {list(topology.region_names)}"
        )
    name = args.name or f"rebuilder-{args.region}"
    if args.metrics_address is not None:
        _host_port(args.metrics_address)  # checked before anything starts
    overrides = {
        key: getattr(args, key) for key in REBUILD_OVERRIDES if getattr(args, key) is not None
    }
    settings = dataclasses.replace(topology.rebuild, **overrides)
    logs.configure(args.log_format, service="rebuilder", proxy=name, region=args.region)
    event_loop.run(
        serve_rebuilder(
            topology, args.region, name, settings, args.zk_session_timeout_s, args.metrics_address
        )
    )
    return 0


def run_console(args: argparse.Namespace, topology: Topology) -> int:
    from console.server import ConsoleSettings, serve_console

    if args.region not in topology.region_names:
        raise ConfigError(
            f"--region {args.region!r}: expected one of {list(topology.region_names)}"
        )
    listed = topology.region(args.region).consoles
    chosen = [c for c in listed if args.name is None or c.name == args.name]
    if args.listen is not None:
        host, port = _host_port(args.listen)
        name = args.name or f"console-{args.region}"
        console = Proxy(name, args.region, Endpoint(host, port))
    elif chosen:
        console = chosen[0]
    else:
        raise ConfigError(
            f"--name {args.name!r}: the consoles of {args.region} are "
            f"{[c.name for c in listed]}; or give --listen HOST:PORT"
        )
    hidden = frozenset(ns.strip() for ns in args.hide_payloads.split(",") if ns.strip())
    settings = ConsoleSettings(console.name, args.region, hidden, args.failover_runs)
    logs.configure(args.log_format, service="console", proxy=console.name, region=args.region)
    telemetry.install_prometheus("globelog-console", args.region, console.name)

    async def main() -> None:
        await serve_console(
            topology, console, settings, args.audit_log, args.zk_session_timeout_s,
            _stop_on_signals(), default_token(topology.security),
        )  # fmt: skip

    event_loop.run(main())
    return 0


def run(args: argparse.Namespace, default_topology: Path) -> int:
    topology = load_checked_topology(args.topology or default_topology)
    if args.kind == "rebuilder":
        return run_rebuilder(args, topology)
    if args.kind == "console":
        return run_console(args, topology)
    kind = "write" if args.kind == "write-proxy" else "read"
    proxy = pick_proxy(topology, args.region, args.name, kind)
    logs.configure(args.log_format, service=args.kind, proxy=proxy.name, region=proxy.region)
    # uvloop: the proxies' event loop (HTTP parsing, bookie sockets, timers) on libuv
    if not 0.0 <= args.trace_sample <= 1.0:
        raise ConfigError(f"--trace-sample {args.trace_sample}: expected a share 0..1")
    event_loop.run(
        serve_proxy(
            topology,
            proxy,
            kind,
            args.zk_session_timeout_s,
            args.trace_sample,
            args.trace_file,
            getattr(args, "session_file", None),
            not getattr(args, "no_lock_breaking", False),
        )
    )
    return 0
