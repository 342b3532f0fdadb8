"""The local multi-region cluster: real ZooKeeper, BookKeeper bookies and a WAN emulator."""
