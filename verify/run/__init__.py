"""A failover run over any deployment: the local cluster (verify/live) or the simulation (verify/sim)."""
