"""How a globelog process runs: its event loop, what its heap keeps out of the collector's
walks, and its logs."""
