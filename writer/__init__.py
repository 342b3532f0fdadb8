"""globelog's log writer: stream ownership, sequencing and segment writes (later issues)."""
