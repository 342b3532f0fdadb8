"""`globelog bench spark`: the Spark data source and sink against the library, timed."""
