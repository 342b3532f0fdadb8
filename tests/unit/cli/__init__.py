"""Unit tests of the command line's pure parts (no cluster, no sockets)."""
