"""Golden scripts for the ledger client state machines (testdata/*.txt)."""
