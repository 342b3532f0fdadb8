"""globelog's composition root: the command line, configuration and process lifecycle."""
