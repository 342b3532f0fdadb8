"""`globelog security init` and `globelog token issue|list|revoke` (docs/security.md)."""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path

from cli.stream_args import duration_s
from core.errors import ConfigError
from core.security.files import init_security
from core.security.tokens import Scope
from placement import load_checked_topology
from region.client.tokens import issue_token, list_tokens, revoke_token


def add_arguments(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    security = commands.add_parser("security", help="a deployment's keys and first token")
    sec_sub = security.add_subparsers(dest="action", required=True)
    init = sec_sub.add_parser("init", help="make the signing key and admin token if missing")
    init.add_argument("--topology", type=Path, default=None)
    token = commands.add_parser("token", help="issue, list and revoke access tokens")
    tok_sub = token.add_subparsers(dest="action", required=True)
    issue = tok_sub.add_parser("issue", help="a token within your own token's scope")
    issue.add_argument("--subject", required=True, help="who holds it, e.g. service/billing")
    issue.add_argument("--namespaces", default="*", help="comma-separated names or prefixes*")
    issue.add_argument("--streams", default="*", help="comma-separated names or prefixes*")
    issue.add_argument("--ops", required=True, help="comma-separated: read,append,create,...")
    issue.add_argument("--ttl", default="1d", help="lifetime: 90s, 30m, 12h, 7d")
    tok_sub.add_parser("list", help="unexpired tokens within your token's scope")
    revoke = tok_sub.add_parser("revoke", help="stop a token working on every proxy")
    revoke.add_argument("id")
    for sub in (issue, tok_sub.choices["list"], revoke):
        sub.add_argument("--topology", type=Path, default=None)
        sub.add_argument("--region", default=None, help="whose write proxies to ask first")


def _csv(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def run(args: argparse.Namespace, default_topology: Path) -> int:
    topology = load_checked_topology(args.topology or default_topology)
    if args.command == "security":
        written = init_security(topology.security, time.time(), topology.tls_hosts, topology.name)
        for path in written:
            print(f"wrote {path}")
        print(f"security files in {topology.security.directory}: {len(written)} written")
        return 0
    regions = list(topology.region_names)
    if args.region is not None:
        if args.region not in regions:
            raise ConfigError(f"--region {args.region!r}: expected one of {regions}")
        regions.remove(args.region)
        regions.insert(0, args.region)
    urls = [topology.proxy_url(p) for name in regions for p in topology.region(name).write_proxies]
    if args.action == "issue":
        scope = Scope.parse(
            {
                "namespaces": _csv(args.namespaces),
                "streams": _csv(args.streams),
                "ops": _csv(args.ops),
            }
        )
        answer = asyncio.run(issue_token(urls, args.subject, scope.claim(), duration_s(args.ttl)))
        print(json.dumps(answer))
    elif args.action == "list":
        for token in asyncio.run(list_tokens(urls)):
            print(json.dumps(token))
    else:
        print(json.dumps(asyncio.run(revoke_token(urls, args.id))))
    return 0
