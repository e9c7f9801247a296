"""TorchServe's import-time notices about optional backends it did not find, kept out of the notebook.

``import ts.torch_handler.base_handler`` logs a WARNING for each optional backend that is not installed
(OpenVINO, onnxruntime, Torch-TensorRT). With no logging configured, Python prints them to stderr, which
Jupyter shows in red under the cell, though nothing is wrong. Only those exact messages, on that one
logger, are dropped; every other record of TorchServe's (and the root logger) is left as it was.
"""

from __future__ import annotations

import logging

TS_LOGGER = "ts.torch_handler.base_handler"
OPTIONAL_BACKEND_NOTICES = frozenset(
    {
        "OpenVINO is not enabled",
        "proceeding without onnxruntime",
        "Torch TensorRT not enabled",
    }
)


class OptionalBackendNotices(logging.Filter):
    """Drops the records whose message is one of ``OPTIONAL_BACKEND_NOTICES``."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.getMessage() not in OPTIONAL_BACKEND_NOTICES


def install() -> None:
    """Add the filter to TorchServe's base-handler logger (once; the logger need not exist yet)."""
    logger = logging.getLogger(TS_LOGGER)
    if not any(isinstance(f, OptionalBackendNotices) for f in logger.filters):
        logger.addFilter(OptionalBackendNotices())
