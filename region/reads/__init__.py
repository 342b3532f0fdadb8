"""What a read proxy keeps for its readers: one bounded cache of records per stream, shared by
all of the proxy's readers of it, and the waiters for records still to come (stream_cache)."""
