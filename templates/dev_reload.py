"""The local server's dev entry: the manifest handler of a model folder the notebook's local server serves.

Copied to the folder's top beside ``msnb_runtime/`` (its ``dev`` room does the work); archives never carry it.
"""

from msnb_runtime.dev.reload import handle

__all__ = ["handle"]
