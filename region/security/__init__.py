"""A proxy's security: the gate every request passes (gate: a rule per route, tokens checked
against them) and what a proxy loads and serves for it (service: the revocation list it
follows, the token service of the write proxies)."""
