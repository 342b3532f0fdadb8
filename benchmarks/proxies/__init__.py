"""Benchmarks of the proxies as clients use them: what a write proxy sustains and how soon
every region reads it (throughput), and how hostile clients fare against the limits (abuse)."""
