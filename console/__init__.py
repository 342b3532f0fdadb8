"""globelog's web console (`globelog serve console --region R`): regions, streams, records and
failover runs at a glance, behind the deployment's tokens (docs/console.md)."""
