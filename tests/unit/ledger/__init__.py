"""Unit tests of the ledger codecs (pure, no sockets)."""
