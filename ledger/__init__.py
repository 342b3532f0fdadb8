"""globelog's BookKeeper ledger client: wire codecs, connections, pure machines, drivers.

Sans-IO codecs (bytes in, bytes out):
  codes, errors, protobuf, messages, message_codec, frames, entry, metadata
Pure state machines (events in, actions out; time is an input; no IO):
  add_state (+ add_events), recovery_state (+ recovery_events), read_lac_state, read_state,
  signals (what the machines share), backoff, inflight
Asyncio drivers (sockets and ZooKeeper):
  connection (one pipelined connection), bookie_pool and bookie_client (per-bookie pool),
  slots, connection_errors, metadata_store (ledger metadata in BookKeeper's ZooKeeper layout),
  ping (one-shot round trip)

docs/wire-protocol.md describes the protocol facts the codecs implement and where they come from.
"""
