"""Idempotent writes at the write proxy: each producer's recent writes and where they landed
(`producers`), and that table rebuilt from the stream by a new owner (`rebuild`)."""
