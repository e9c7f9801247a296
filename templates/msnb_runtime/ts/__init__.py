"""TorchServe's interfaces where no TorchServe runs: its Context, model loader, wire format and frontend checks."""
