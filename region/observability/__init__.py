"""What the proxies tell about themselves: metrics served for Prometheus at /metrics
(telemetry) and traces with W3C context at /debug/traces (tracing)."""
