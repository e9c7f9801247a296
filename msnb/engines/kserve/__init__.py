"""KServe's two layouts of model folders, in one place: KServe's TorchServe runtime (``layout``: ROOT/model-store and
ROOT/config/config.properties, ``msnb export --kserve``) and KServe's own Python model server (``python_layout``:
``msnb export --kserve-python``); the runtime's side is ``templates/msnb_runtime/kserve/``.

KServe is not an engine msnb starts: it runs on a cluster. Its TorchServe runtime is a TorchServe, so ``layout``
writes TorchServe's config.properties (``msnb.engines.torchserve.config``); nothing else here stands on an engine.
What a layout needs of msnb's packaging (the archives, the model folders) it is given as data by its caller
(``msnb.session.export``), never imported.
"""

from __future__ import annotations

# KServe's TorchServe runtime mounts the InferenceService's storageUri at /mnt/models and reads two folders of it.
KSERVE_MOUNT = "/mnt/models"
KSERVE_STORE_DIR, KSERVE_CONFIG_DIR = "model-store", "config"
KSERVE_MODEL_STORE = f"{KSERVE_MOUNT}/{KSERVE_STORE_DIR}"
