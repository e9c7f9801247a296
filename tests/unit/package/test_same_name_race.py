"""Two threads that stage and pack the same handler name at once (two generations of one cell: a widget's Build and
a cell run) never corrupt each other: each generation is staged into a folder of its own, kept while a thread holds
it, and each archive is written in a hidden folder of its own, then renamed into place whole."""

from __future__ import annotations

import threading
import zipfile

import pytest

from msnb.package import archive, formats, model_folder
from msnb.spec import spec_from_source

SOURCE = "import torch\n\ndef init_function():\n    return torch.nn.Identity()\n# generation {}\n"
ROUNDS = 8


@pytest.mark.parametrize("fmt", [formats.EXPORT_FORMAT, formats.SERVE_FORMAT])
def test_two_threads_staging_and_packing_one_name_each_get_a_whole_archive(tmp_path, fmt):
    specs = [spec_from_source("same", SOURCE.format(i)) for i in range(2)]
    errors: list[BaseException] = []
    barrier = threading.Barrier(2, timeout=60)

    def build(spec) -> None:
        try:
            for _ in range(ROUNDS):
                barrier.wait()
                folder = model_folder.staged(spec)  # the other thread stages the next generation meanwhile
                path = archive.pack(folder, tmp_path, fmt=fmt)
                if path.is_file():  # a file is replaced atomically: a reader always finds a whole archive
                    assert "# generation" in handler_text(path)
        except BaseException as err:  # reported below, with the other thread's
            errors.append(err)
            barrier.abort()

    threads = [threading.Thread(target=build, args=(spec,)) for spec in specs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors
    final = "same" if fmt == formats.SERVE_FORMAT else "same.mar"
    assert [p.name for p in tmp_path.iterdir()] == [final], "no partial file or folder is left"
    text = handler_text(tmp_path / final)
    assert ("# generation 0" in text) != ("# generation 1" in text), "one generation whole, not a mix"
    model_folder.forget("same")


def handler_text(path) -> str:
    if path.is_dir():
        return (path / "handler_model.py").read_text()
    with zipfile.ZipFile(path) as zf:
        assert zf.testzip() is None
        return zf.read("handler_model.py").decode()
