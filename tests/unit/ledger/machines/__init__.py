"""Unit tests of the ledger state machines: adds, recovery, their signals and liveness."""
