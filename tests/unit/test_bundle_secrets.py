"""Bundling ships code and the data it needs, never secrets: secret-looking files and links leaving the package stay
behind, each named, unless the user names them."""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

from msnb.capture.cells import capture
from msnb.capture.local_code import search_path
from msnb.options import handler_config, parse_handler_line
from msnb.package import archive, formats

CELL = "import torch\nimport mypkg\n\ndef init_function():\n    return torch.nn.Linear(mypkg.N, 1)\n"
KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----\n"
SECRETS = {
    "mypkg/id_rsa": KEY,
    "mypkg/credentials.json": '{"password": "hunter2"}',
    "mypkg/server.pem": KEY,
    "mypkg/.env": "API_TOKEN=abc\n",
    "mypkg/notes/token.txt": "ghp_abc\n",
    "mypkg/settings.yaml": "name: x\nkey: |\n  " + KEY.replace("\n", "\n  "),  # a key inside an innocent name
}


def make_project(root: Path) -> Path:
    files = {"mypkg/__init__.py": "N = 2\n", "mypkg/vocab.txt": "a b c\n", **SECRETS}
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    (root / "mypkg" / "passwd.txt").symlink_to("/etc/passwd")
    (root / "mypkg" / "inside.txt").symlink_to(root / "mypkg" / "vocab.txt")  # stays inside: travels
    return root


def capture_in(root: Path, options: str = ""):
    config = handler_config(parse_handler_line(f"m {options}"), {}, root)
    return capture("m", CELL, [], search_path=search_path(root), **config)


def archived(spec, out: Path) -> set[str]:
    path = archive.build(spec, out, fmt=formats.DEV_FORMAT)
    with zipfile.ZipFile(path) as z:
        return set(z.namelist())


def test_secret_looking_files_and_a_link_to_etc_passwd_stay_behind_each_named(tmp_path):
    root = make_project(tmp_path / "nb")
    spec = capture_in(root)
    names = archived(spec, tmp_path / "out")
    assert {"mypkg/__init__.py", "mypkg/vocab.txt", "mypkg/inside.txt"} <= names
    left = [*SECRETS, "mypkg/passwd.txt"]
    assert not names & set(left), "no secret and no /etc/passwd in the archive"
    lines = [w for w in spec.warnings if w.startswith("left out of the archive:")]
    assert len(lines) == len(left) and all(any(f"{name} (" in line for line in lines) for name in left)
    assert any("mypkg/passwd.txt (a symlink leaving the package)" in w for w in lines)
    assert any("mypkg/settings.yaml (holds a private key)" in w for w in lines)
    assert any("--include-file PATH" in w for w in spec.warnings)


def test_the_summary_counts_bundled_files_and_names_the_data(tmp_path):
    spec = capture_in(make_project(tmp_path / "nb"))
    assert spec.bundled == ("mypkg/ (3 files; data: inside.txt, vocab.txt)",)


def test_a_file_named_with_include_file_travels(tmp_path):
    root = make_project(tmp_path / "nb")
    spec = capture_in(root, "--include-file mypkg/server.pem mypkg/notes/token.txt")
    names = archived(spec, tmp_path / "out")
    assert {"mypkg/server.pem", "mypkg/notes/token.txt"} <= names and "mypkg/id_rsa" not in names
    assert not any("server.pem" in w or "token.txt" in w for w in spec.warnings)


def test_a_large_data_file_is_scanned_in_chunks(tmp_path):
    root = make_project(tmp_path / "nb")
    with open(root / "mypkg" / "blob.bin", "wb") as f:
        f.write(os.urandom(2**20 - 10) + KEY.encode())  # the header crosses the first chunk's end
    spec = capture_in(root)
    assert any("mypkg/blob.bin (holds a private key)" in w for w in spec.warnings)
