"""What a proxy lets in: connections within their cap and deadlines (listener), and each
client's requests and bytes within its quota (quotas). The bounds are core/settings/limits.py's."""
