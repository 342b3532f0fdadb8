"""`globelog bench console`: the web console's server time (bench.py)."""
