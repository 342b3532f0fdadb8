"""Verification of globelog runs: failover histories and the checker of DESIGN.md §5."""
