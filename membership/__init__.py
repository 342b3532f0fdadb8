"""Regions joining and leaving a running deployment (`globelog region add|remove|status`).

- plans: the topology file with a region added or removed, checked as topology.yaml is
- safety: what a removal would make unavailable or under-replicated, before it starts
- changes: the steps of each change, recorded in ZooKeeper as they complete, resumable

docs/deploy.md walks through both procedures; docs/design.md places this package above the
proxies (region/) and the rebuilders (rebuild/), whose drains and decommissions it drives.
"""
