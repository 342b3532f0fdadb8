"""What a deployment configures beyond its topology: limits and quotas, rebuilding, stream settings."""
