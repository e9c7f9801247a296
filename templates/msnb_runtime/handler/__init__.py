"""The shared batching/device handler every model folder and .mar carries, and the modules it needs."""
