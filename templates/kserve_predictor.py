"""KServe's Python model server over the TorchServe model folders beside this file (``python kserve_predictor.py``).

Copied to the folder's top beside ``msnb_runtime/`` (its ``kserve`` room does the work).
"""

from pathlib import Path

from msnb_runtime.kserve.predictor import serve

if __name__ == "__main__":
    serve(Path(__file__).resolve().parent)
