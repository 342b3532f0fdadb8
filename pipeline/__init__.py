"""globelog's PySpark data pipeline (later issues)."""
