"""Rebuilding: a lost bookie's copies re-made elsewhere, many-to-many, keeping the region rule.

  pacing.py     the byte rate a rebuilder copies at, shared by its ledgers
  auditor.py    one per cluster (elected): notices lost bookies and ensembles that break the
                rule, and marks their ledgers under-replicated
  worker.py     in every region: claims marked ledgers and re-makes their copies
  status.py     what `globelog rebuild status` shows: marked ledgers, claims, rebuilders
  service.py    the `globelog serve rebuilder` role: an auditor candidate and a worker

Its settings are topology.yaml's `rebuild:` section (core/settings/rebuild_settings.py). The state
lives in ZooKeeper in BookKeeper's own under-replication layout
(ledger.codecs.underreplication), so BookKeeper's tools see what globelog marks. The copying
itself is the ledger's (ledger.drivers.rebuild); docs/operations.md says how it behaves.
"""
