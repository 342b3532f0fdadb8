"""globelog's per-region servers and their clients.

The write proxy (write_proxy: streams owned through ownership, idempotent writes through
producers and idempotence, drains through drain, bulk bodies in bodies.batches) and the read
proxy (read_proxy, one reads.stream_cache per stream); the live proxies and the ring that homes each
stream (registry); whether a proxy is cut off from most regions (isolation); errors as HTTP
answers (http_errors); metrics, traces and structured logs (telemetry, tracing, logs); the
Python client of the proxies (client, client_extras); a library-mode program's connections in
one region (connections) and the commands' event loop (event_loop). docs/http-api.md.
"""
