"""globelog's stream writer: ownership, sequencing and segment writes, in library mode.

LogWriterState, the pure machine of one stream's writes (state, events), and LogWriter, its
asyncio driver (log_writer; bulk holds what a write_bulk call waits for); a new owner's
fencing and recovery of the last segment (recovery) and its new segment, a new epoch
(segment_start); stream administration: create, delete, describe, truncate, retention
(admin).
"""
