"""The `globelog region` commands' work: an operator's session to the ZooKeeper nodes that
stay, and the change run through it (the argument parsing is cli/region_main.py)."""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path

from core.errors import ConfigError
from core.security.secrets import zk_login
from core.topology import Topology
from global_meta import MetaStore
from ledger import LedgerClient, LedgerConfig
from localcluster.probes import zookeeper_tls
from membership.changes import (
    REMOVE_STEPS,
    Change,
    add_region,
    check_removal,
    finish,
    one_change_at_a_time,
    read_record,
    read_records,
    records_json,
    remove_region,
)
from membership.plans import plan_add, plan_join, region_name
from placement import load_checked_topology

OPERATOR_SESSION_S = 4.0


def _say(line: str) -> None:
    print(line, flush=True)


async def _change(
    topology: Topology, path: Path, home: str, zk_nodes: list[str], wait_s: float
) -> tuple[MetaStore, LedgerClient, Change]:
    """The operator's session to the ZooKeeper nodes that stay, and a ledger client homed in
    a region that stays."""
    # a short session: a killed command's lock goes with it (ZooKeeper's floor: two ticks)
    store = await MetaStore.connect(
        ",".join(zk_nodes), zk_login(topology.security), session_timeout_s=OPERATOR_SESSION_S
    )
    try:
        ledgers = await LedgerClient.connect(store, LedgerConfig.of(topology, home))
    except BaseException:
        await store.close()
        raise
    tls = zookeeper_tls(topology.security)
    return store, ledgers, Change(store, ledgers, path, topology, _say, wait_s, tls)


def run(args: argparse.Namespace, default_topology: Path) -> int:
    path = Path(args.topology or default_topology)
    topology = load_checked_topology(path)
    region_file = getattr(args, "region_file", None)
    try:
        region_text = None if region_file is None else region_file.read_text()
    except OSError as err:
        raise ConfigError(f"--from {region_file}: cannot read it ({err.strerror})") from err
    return asyncio.run(_run(args, path, topology, path.read_text(), region_text))


async def _removed_from_the_file(topology: Topology, path: Path, region: str) -> int:
    """`region remove R` with R gone from the topology file: a finished removal, or one whose
    last step rewrote the file before the command was killed (the file is the proof it ran:
    the record is finished now), or a file edited by hand under a removal under way."""
    async with await MetaStore.of(topology) as store:
        record = await read_record(store, region)
        if record is not None and record.kind == "remove" and record.finished_ms is None:
            missing = [s for s in REMOVE_STEPS[:-1] if not record.done(s)]
            if missing:
                raise ConfigError(
                    f"the topology file no longer lists {region}, but its removal stopped "
                    f"before {missing[0]}: put the file it had back (kept beside it as "
                    f"{path.name}.before-remove-{region}) and run the "
                    "command again"
                )
            await finish(store, record, REMOVE_STEPS[-1])
            print(f"region {region} is removed (its last step had rewritten the file)")
            return 0
    if record is not None and record.kind == "remove":
        print(f"region {region} was removed already")
        return 0
    raise ConfigError(
        f"region {region!r}: expected one of {list(topology.region_names)} that is not the only one"
    )


def _require_deployment(topology: Topology) -> None:
    if topology.wan is not None:
        raise ConfigError(
            f"topology {topology.name!r} emulates a WAN (the local cluster): regions join and "
            "leave a deployment, where ZooKeeper's reconfiguration is on; the local cluster "
            "plans its WAN routes and ZooKeeper peers when it starts (docs/cluster.md)"
        )


async def _run(
    args: argparse.Namespace,
    path: Path,
    topology: Topology,
    text: str,
    region_text: str | None,
) -> int:
    if args.action == "status":
        async with await MetaStore.of(topology) as store:
            records = await read_records(store)
            members = (await store.ensemble()).servers
        if args.json:
            document = {"changes": records_json(records), "zookeeper": members}
            print(json.dumps(document, indent=1))
        else:
            print("\n".join(line for r in records for line in r.describe()) or "no region change")
            print("ZooKeeper members: " + ", ".join(f"{i} {s}" for i, s in sorted(members.items())))
        return 0
    _require_deployment(topology)
    if args.action == "remove":
        stays = [r for r in topology.region_names if r != args.name]
        if args.name not in topology.region_names:
            return await _removed_from_the_file(topology, path, args.name)
        if not stays:
            raise ConfigError(
                f"region {args.name!r}: expected one of {list(topology.region_names)} that "
                "is not the only one"
            )
        nodes = [n.client.address for n in topology.zookeeper if n.region != args.name]
        store, ledgers, change = await _change(topology, path, stays[0], nodes, args.wait_s)
        try:
            if args.check:
                report = await check_removal(change, args.name)
                print("\n".join(report.lines()) or f"removing {args.name} is safe now")
                return 0 if report.safe else 2
            async with one_change_at_a_time(store, f"remove {args.name}") as change.lock:
                return await remove_region(change, args.name, force=args.force, until=args.until)
        finally:
            await ledgers.close()
            await store.close()
    if region_text is not None:
        name = region_name(region_text, str(args.region_file))
        if args.name is not None and args.name != name:
            raise ConfigError(f"region add {args.name}: {args.region_file} adds {name!r}")
        if name in topology.region_names:
            plan = plan_join(text, name)  # merged by an earlier run
        else:
            plan = plan_add(text, region_text, str(args.region_file))
    elif args.name is not None:
        plan = plan_join(text, args.name)
    else:
        raise ConfigError("region add: name a region the topology lists, or give --from FILE")
    nodes = [n.client.address for n in plan.before.zookeeper]
    store, ledgers, change = await _change(
        plan.before, path, plan.before.region_names[0], nodes, args.wait_s
    )
    try:
        async with one_change_at_a_time(store, f"add {plan.region}") as change.lock:
            return await add_region(change, plan, until=args.until)
    finally:
        await ledgers.close()
        await store.close()
