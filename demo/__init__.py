"""`make demo`: the story of a multi-region log on a local cluster, told step by step."""
