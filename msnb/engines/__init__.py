"""Engines that serve model folders: TorchServe (``engines.torchserve``) and Ray Serve (``engines.ray``).

Both implement ``Engine`` (``engines.protocol``) and stand side by side: what both speak lives at this folder's top
(``models``: TorchServe's API, which Ray's router answers too; ``auth``: its keys; ``store``; ``watchdog``; ``chunks``),
and Ray takes from TorchServe only its REST client. They import nothing above them (errors, files and the shipped
runtime only).
"""
