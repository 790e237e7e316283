"""EDT scheduler: pure policies and placement, the Redis store, and the service loop."""
