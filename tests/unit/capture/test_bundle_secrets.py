"""Bundling ships code and the data it needs, never secrets: secret-looking files and links leaving the package stay
behind, each named, unless the user names them."""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import pytest
import torch

from msnb.capture import secret_scan
from msnb.capture.cells import capture
from msnb.capture.local_code import search_path
from msnb.errors import CaptureError, SpecError
from msnb.options import handler_config, parse_handler_line
from msnb.package import archive, formats
from msnb.package.model_folder import ModelFolder
from msnb.ui.display import SpecSummary

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
    assert any("mypkg/settings.yaml (holds a secret (Private Key, line" in w for w in lines)
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
    assert any("mypkg/blob.bin (holds a secret (Private Key, line" in w for w in spec.warnings)


GITHUB_TOKEN = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
PGP = "-----BEGIN PGP PRIVATE KEY BLOCK-----\n\nlQOYBGXyZ3sBCAC7\n-----END PGP PRIVATE KEY BLOCK-----\n"
FOUND_BY_CONTENT = {  # innocent names: only the content gives them away
    "mypkg/pgp.asc": (PGP, "Private Key, line 1"),
    "mypkg/rsa_utf16.txt": (KEY.replace("OPENSSH", "RSA"), "Private Key, line 1"),
    "mypkg/notes.txt": (f"deploy with {GITHUB_TOKEN}\n", "GitHub Token, line 1"),
    "mypkg/aws_config.ini": ("[default]\naws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\n", "line 2"),
    "mypkg/putty_key.txt": ("PuTTY-User-Key-File-3: ssh-ed25519\nEncryption: none\n", "Private Key, line 1"),
    "mypkg/settings.py.txt": ("API_TOKEN = 'Zm9vYmFyYmF6cXV4MTIzNDU2Nzg5MGFiY2RlZmdoaWprbG1u'\n", "High Entropy"),
}


def test_secrets_are_found_by_content_in_every_armor_and_in_utf16_and_a_link_to_a_hidden_file_stays(tmp_path):
    root = make_project(tmp_path / "nb")
    for name in [*SECRETS, "mypkg/passwd.txt"]:  # only this test's files are left out: every one is listed
        (root / name).unlink()
    for name, (text, _) in FOUND_BY_CONTENT.items():
        (root / name).write_bytes(text.encode("utf-16" if "utf16" in name else "utf-8"))
    (root / "mypkg/api_key.txt").write_text(GITHUB_TOKEN)
    (root / "mypkg/passwords.txt").write_text("admin: hunter2\n")
    (root / "mypkg/.envrc_target_hidden").write_text("export AWS_SESSION=x\n")
    (root / "mypkg/config_link.txt").symlink_to(".envrc_target_hidden")
    (root / "mypkg/vocab_link.txt").symlink_to("vocab.txt")  # a file that travels itself: the link does too
    spec = capture_in(root)
    names = archived(spec, tmp_path / "out")
    left = [*FOUND_BY_CONTENT, "mypkg/api_key.txt", "mypkg/passwords.txt", "mypkg/config_link.txt"]
    assert not names & set(left) and {"mypkg/vocab.txt", "mypkg/vocab_link.txt"} <= names
    for name, (_, says) in FOUND_BY_CONTENT.items():
        assert any(f"{name} (holds a secret (" in w and says in w for w in spec.warnings), name
    assert any("mypkg/config_link.txt (a symlink to a hidden file)" in w for w in spec.warnings)
    assert any("mypkg/passwords.txt (a secret-looking name (*password*))" in w for w in spec.warnings)


def test_a_module_holding_a_private_key_is_refused_with_its_line_and_nothing_is_built(tmp_path):
    root = make_project(tmp_path / "nb")
    (root / "mypkg/__init__.py").write_text(f"N = 2\nDEPLOY_KEY = '''\n{KEY}'''\n")
    with pytest.raises(CaptureError) as err:
        capture_in(root)
    assert "The local module mypkg/__init__.py holds a secret (Private Key, line 3)" in err.value.message
    assert "move the secret out of" in err.value.hint and "environment variable" in err.value.hint
    assert not (tmp_path / "out").exists()


def test_the_secret_scan_of_a_500_file_package_reads_every_file(tmp_path):
    """The figure (CPU and wall time, with the load) is in docs/hardening.md; here: every file is read, none flagged."""
    source = Path(torch.nn.modules.linear.__file__).read_text().splitlines()
    for i in range(500):
        (tmp_path / f"mod{i}.py").write_text("\n".join(source[(i * 7) % 200 : (i * 7) % 200 + 60]))
    assert [secret_scan.scan(p) for p in sorted(tmp_path.iterdir())] == [None] * 500


def test_file_names_with_control_characters_are_shown_escaped_and_never_archived(tmp_path):
    root = make_project(tmp_path / "nb")
    for name in [*SECRETS, "mypkg/passwd.txt"]:
        (root / name).unlink()
    (root / "mypkg" / "\x1b[31mred.txt").write_text("a\n")
    (root / "mypkg" / "split\nline.txt").write_text("b\n")
    (root / "mypkg" / "back\\slash.txt").write_text("c\n")
    spec = capture_in(root)
    names = archived(spec, tmp_path / "out")
    assert not [n for n in names if "red" in n or "split" in n or "slash" in n]
    text = SpecSummary(spec).text()
    assert "\x1b" not in text and "split\n" not in text and "mypkg/\\x1b[31mred.txt (a name with a backslash" in text
    assert "mypkg/split\\nline.txt (a name with" in text and all(
        line.startswith("  ") for line in text.splitlines()[1:]
    )
    assert "\x1b" not in SpecSummary(spec)._repr_html_()


def test_an_extra_file_named_with_a_control_character_is_refused(tmp_path):
    root = make_project(tmp_path / "nb")
    (root / "bell\x07.txt").write_text("x")
    with pytest.raises(SpecError, match=r"Extra file .*bell\\x07.txt.* has a name with a backslash or a control"):
        ModelFolder.stage(capture_in(root, "--extra-files 'bell\x07.txt'"), tmp_path / "model")
    assert not (tmp_path / "model").exists()
