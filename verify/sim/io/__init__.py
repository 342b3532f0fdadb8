"""The simulated world under globelog's real code: a deterministic event loop with virtual
time and simulated hosts (`loop`), TCP between them (`network`), and the servers the real
clients talk to (`bookie_server`)."""
