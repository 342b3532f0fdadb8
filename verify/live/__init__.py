"""The live failover run: a workload and a nemesis against a real local cluster, whose history
goes to the checker (verify.checker) and whose final reads go through every region."""
