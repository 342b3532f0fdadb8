"""The ledger client's drivers: asyncio code that runs the pure machines over the connections
and ZooKeeper. LedgerWriter (write_handle), LedgerReader (read_handle, batch_reads), recovery
(recover), the machine runner (runner), what handles share (context), ledger metadata in
ZooKeeper (metadata_store, cluster_init), telemetry, and LedgerClient (client) composing them.
"""
