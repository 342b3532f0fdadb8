"""Verification of globelog runs: failover histories and the checker of docs/design.md §5."""
