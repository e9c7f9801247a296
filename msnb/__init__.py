"""msnb: notebook cells become TorchServe model archives, served and tested from the notebook."""

from msnb.errors import MsnbError
from msnb.spec import HandlerSpec, SourceBlock

__version__ = "0.1.0"
__all__ = ["HandlerSpec", "MsnbError", "SourceBlock", "__version__"]
