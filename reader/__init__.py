"""globelog's log reader: tailing and catch-up reads of streams (later issues)."""
