"""globelog's benchmarks: each prints its figures (medians and percentiles, with the process
layout, fsync policy and WAN profile) and, where a peer exists, the peer's beside them in the
same run. `globelog bench NAME` runs one; harness.py holds what they share."""
