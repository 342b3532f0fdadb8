"""The local multi-region cluster: starts, watches and faults real ZooKeeper nodes, BookKeeper
bookies, the WAN emulator and globelog's proxies on one machine, for `globelog cluster`, the
demo, the benchmarks and the tests. The per-role configurations it writes (nodes.py) are the
ones `globelog config` writes for real hosts."""
