"""KServe's own Python model server over TorchServe model folders."""
