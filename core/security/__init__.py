"""Security's pure parts: access tokens and their scopes (tokens), the topology's `security:`
section (settings), the files `globelog security init` makes (files), and where a client's
token comes from (credentials). docs/security.md tells the whole of it."""
