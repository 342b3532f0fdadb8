"""globelog's stream reader: catch-up and tailing reads of streams, in library mode.

Where a read starts over the segment list (positions; entry_search inside a segment),
LogReader delivering each record once, in order, across segments (log_reader), fixed ranges
read independently for Spark (ranges), archived segments read from Parquet (archive), and a
reading process's connections (session).
"""
