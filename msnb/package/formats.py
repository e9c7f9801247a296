"""The archive formats (msnb's names, torch-model-archiver's, what each is for) and the default export folder."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Format:
    """An archive format: msnb's name for it, torch-model-archiver's, and what it is for."""

    name: str
    archiver: str
    help: str


EXPORT_FORMAT, DEV_FORMAT, SERVE_FORMAT = "mar", "zip-store", "no-archive"
# The one vocabulary of archive formats (the magics, the widget, the CLI and the server use these names);
# the second field is torch-model-archiver's --archive-format.
FORMATS = {
    f.name: f
    for f in (
        Format(EXPORT_FORMAT, "default", "the archiver's standard compressed .mar (export, sharing)"),
        Format(DEV_FORMAT, "zip-store", "an uncompressed .mar, fast to build (the dev loop)"),
        Format(SERVE_FORMAT, "no-archive", "a model folder; what the local server registers"),
    )
}
DEFAULT_EXPORT = "model_store"  # the folder %ms_build, msnb.build and `msnb export` write to
