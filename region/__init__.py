"""globelog's per-region servers: write and read proxies, routing (later issues)."""
