"""Engines that serve model folders: TorchServe (``engines.torchserve``) and Ray Serve (``engines.ray``).

Both implement ``Engine`` (``engines.protocol``); they import nothing above them (errors, files and the
shipped runtime only).
"""
