"""Figures for people: percentiles of measured samples and the PNG plots beside printed tables
(benchmarks, the demo, the failover run, the Spark report)."""
