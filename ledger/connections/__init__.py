"""Connections to bookies on asyncio: one pipelined connection (connection), the per-bookie
pool with backoff (bookie_pool, backoff), typed calls by bookie id (bookie_client), the
in-flight bounds (inflight, slots), and a one-shot round trip (ping). Below the machines'
level: they know requests and responses, not ledgers' replication rules.
"""
