"""DistributedLog's own library (benchmarks/java/DlBench.java, `globelog bench dl`) writes to
the deployment's bookies through its ZooKeeper, with the deployment's logins and TLS: a short
commit run on the real cluster, its records in new ledgers of the cluster's metadata."""

from __future__ import annotations

from benchmarks.dl import DL_ROOT, DlJvm, distributedlog_classpath
from global_meta import ANY_VERSION, MetaStore
from ledger.drivers.metadata_store import LedgerMetadataStore
from localcluster.controller import Cluster
from localcluster.tools import Tools


async def test_distributedlogs_library_commits_records_to_our_bookies(
    cluster: Cluster, tools: Tools
) -> None:
    async with await MetaStore.of(cluster.topology) as store:
        ledgers = LedgerMetadataStore(store)
        before = set(await ledgers.ledger_ids())
        try:
            jvm = DlJvm(tools, cluster, distributedlog_classpath(), warmup_s=0)
            commit = (await jvm.run("commit", 20))["commit"]
            assert commit.records == 20 and len(commit.latencies_ms) == 20
            assert all(ms > 0 for ms in commit.latencies_ms)
            assert await store.exists(DL_ROOT) is not None, "no namespace bound"
            made = set(await ledgers.ledger_ids()) - before
            assert made, "DistributedLog wrote no ledger in the cluster's BookKeeper metadata"
        finally:
            # DistributedLog makes its own znodes open to the world: they go, and its
            # ledgers with them, so the cluster's other tests find only the deployment's
            for ledger_id in set(await ledgers.ledger_ids()) - before:
                await ledgers.delete(ledger_id)
            if await store.exists(DL_ROOT) is not None:
                await store.delete(DL_ROOT, version=ANY_VERSION, recursive=True)


async def test_a_distributedlog_writer_waiting_for_the_lock_takes_the_log_after_a_kill(
    cluster: Cluster, tools: Tools
) -> None:
    """Row 5's DistributedLog side: a JVM holding a log's writer is killed, and a second one
    queued for its lock writes once DistributedLog's ZooKeeper session (1 s) has ended."""
    async with await MetaStore.of(cluster.topology) as store:
        ledgers = LedgerMetadataStore(store)
        before = set(await ledgers.ledger_ids())
        try:
            jvm = DlJvm(tools, cluster, distributedlog_classpath(), warmup_s=0)
            [sample] = await jvm.takeovers(1, 1, lambda _: None)
            # the lock outlives its holder by its session: at least 2/3 of it (a ping was at
            # most a third of it before the kill), and the wait is bounded
            assert 0.6 <= sample < 30, sample
        finally:
            for ledger_id in set(await ledgers.ledger_ids()) - before:
                await ledgers.delete(ledger_id)
            if await store.exists(DL_ROOT) is not None:
                await store.delete(DL_ROOT, version=ANY_VERSION, recursive=True)
