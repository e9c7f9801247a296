"""The names of a model folder's files: one module for msnb's packaging side and for the runtime in every archive.

msnb imports it as ``msnb.templates.msnb_runtime.handler.names``; the runtime, in a model folder, as ``msnb_runtime``'s. A file
named here is spelled nowhere else (tests/unit/test_one_source.py holds both sides to it). The rule for a model's
name and version is here too: the spec checks it, the engines refuse what breaks it.
"""

import re

HANDLER_MODULE = "handler_model"  # the rendered user code, handler_model.py: the manifest's handler
CHECKPOINT = "model.pt"  # the checkpoint (a user's own handler may keep its file's own name)
CONFIG = "model-config.yaml"  # TorchServe's per-model configuration
REQUIREMENTS = "requirements.txt"  # the pinned third-party requirements
VALUES_FILE = "values.pt"  # the kernel's runtime values (read by handler.values)
HF_DIR = "hf_objects"  # Hugging Face objects, one folder each by name (read by handler.hf)
MODEL_FILE = "model_file.py"  # an eager BaseHandler's model class: the manifest's modelFile
MANIFEST = "MAR-INF/MANIFEST.json"  # torch-model-archiver's manifest
API_CARD = "msnb_api.json"  # how the model shows at /v1 and as an MCP tool (msnb.package.api_card, api.mcp)

# A model's name and version are URL path segments (/predictions/NAME/VERSION): '/', '?', '#', '%' or an empty
# version register but cannot be predicted on or removed (TorchServe registers an empty one as 1.0).
_SEGMENT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_\-.]*$")
SEGMENT_RULE = "letters, digits, '_', '-' or '.', starting with a letter or digit"


def valid_segment(text: str) -> bool:
    """True when ``text`` can be a model name or version in TorchServe's URLs."""
    return bool(_SEGMENT.match(text or ""))
