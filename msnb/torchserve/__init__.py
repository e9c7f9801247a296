"""TorchServe from Python: its process (LocalServer), its REST APIs (TorchServeClient), its files and logs.

Imports nothing from msnb's notebook or packaging side: it serves any TorchServe archive.
"""

from msnb.torchserve.client import TorchServeClient
from msnb.torchserve.models import ModelStatus, PredictionError
from msnb.torchserve.server import LocalServer, default_server

__all__ = ["LocalServer", "ModelStatus", "PredictionError", "TorchServeClient", "default_server"]
