"""An archive from elsewhere is untrusted input: a member leaving the folder, a link pointing out, members inflating
past a bound are refused before anything is unpacked, and nothing is written outside the model's own folder."""

from __future__ import annotations

import io
import json
import stat
import tarfile
import zipfile

import pytest

from msnb.errors import ServerError
from msnb.package.model_folder import ModelFolder
from msnb.templates.msnb_runtime.handler import unpack

MANIFEST = json.dumps({"model": {"modelName": "m", "modelVersion": "1.0", "handler": "h.py"}}).encode()
GOOD = {"MAR-INF/MANIFEST.json": MANIFEST, "h.py": b"def handle(data, context):\n    return data\n"}


def zip_archive(path, members: dict, links: dict | None = None):
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
        for name, target in (links or {}).items():
            info = zipfile.ZipInfo(name)
            info.external_attr = (stat.S_IFLNK | 0o777) << 16
            zf.writestr(info, target)
    return path


def tar_archive(path, members: dict, links: dict | None = None):
    with tarfile.open(path, "w:gz") as tf:
        for name, data in members.items():
            info = tarfile.TarInfo(f"m/{name}" if not name.startswith(("/", "..")) else name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(f"m/{name}")
            info.type, info.linkname = tarfile.SYMTYPE, target
            tf.addfile(info)
    return path


def written(root) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.mark.parametrize("make", [zip_archive, tar_archive])
@pytest.mark.parametrize(
    "members, links, refusal",
    [
        ({"../evil.txt": b"pwned"}, {}, "unsafe member '../evil.txt'"),
        ({"/tmp/msnb-evil.txt": b"pwned"}, {}, "unsafe member '/tmp/msnb-evil.txt'"),
        ({}, {"out": "../../../etc/passwd"}, "a link 'm/out' pointing out of its folder"),
        ({}, {"abs": "/etc/passwd"}, "pointing out of its folder ('/etc/passwd')"),
    ],
)
def test_an_archive_with_a_member_or_link_leaving_its_folder_is_refused_before_anything_is_unpacked(
    tmp_path, make, members, links, refusal
):
    if make is zip_archive:
        refusal = refusal.replace("'m/", "'")
    (tmp_path / "src").mkdir()
    archive = make(tmp_path / "src" / "a.mar", {**GOOD, **members}, links)
    store = tmp_path / "store"
    with pytest.raises(ServerError, match="is refused, nothing unpacked: it ") as caught:
        ModelFolder.open(archive, store)
    assert refusal in caught.value.message and caught.value.message.count("a.mar") == 1  # its path said once
    assert "tar " not in caught.value.hint  # a .mar is rebuilt by torch-model-archiver, not tar
    assert written(store) == [] and written(tmp_path) == ["src", "src/a.mar", "store"]


def test_members_inflating_past_the_bound_are_refused_before_anything_is_unpacked(tmp_path, monkeypatch):
    monkeypatch.setattr(unpack, "MAX_UNPACKED_BYTES", 1_000_000)
    bomb = zip_archive(tmp_path / "bomb.mar", {**GOOD, "zeros.bin": bytes(2_000_000)})
    assert bomb.stat().st_size < 20_000  # a small file that inflates a hundredfold
    with pytest.raises(ServerError, match="would inflate to 2000") as caught:
        ModelFolder.open(bomb, tmp_path / "store")
    assert "zip bomb" in caught.value.hint
    assert written(tmp_path / "store") == []


def test_a_good_archive_opens_into_its_own_folder_in_the_store(tmp_path):
    opened = ModelFolder.open(zip_archive(tmp_path / "a.mar", GOOD), tmp_path / "store")
    assert (opened.name, opened.version, opened.requirements) == ("m", "1.0", ())
    assert written(tmp_path / "store") == ["m-1.0", "m-1.0/MAR-INF", "m-1.0/MAR-INF/MANIFEST.json", "m-1.0/h.py"]


def test_a_folder_with_a_link_pointing_out_is_refused(tmp_path):
    folder = tmp_path / "model"
    (folder / "MAR-INF").mkdir(parents=True)
    (folder / "MAR-INF" / "MANIFEST.json").write_bytes(MANIFEST)
    (folder / "h.py").write_bytes(GOOD["h.py"])
    (folder / "secret").symlink_to("/etc/passwd")
    with pytest.raises(ServerError, match="pointing out of the model folder"):
        ModelFolder.open(folder, tmp_path / "store")
    assert written(tmp_path / "store") == []


def test_requirements_asking_for_another_torch_are_refused(tmp_path):
    manifest = json.loads(MANIFEST)
    manifest["model"]["requirementsFile"] = "requirements.txt"
    members = {**GOOD, "MAR-INF/MANIFEST.json": json.dumps(manifest).encode(), "requirements.txt": b"torch==1.13.1\n"}
    with pytest.raises(ServerError, match="torch==1.13.1") as caught:
        ModelFolder.open(zip_archive(tmp_path / "a.mar", members), tmp_path / "store")
    assert "never installs a second torch" in caught.value.hint
    members["requirements.txt"] = b"--index-url http://evil/simple\n"
    with pytest.raises(ServerError, match="not a PEP 508 requirement"):
        ModelFolder.open(zip_archive(tmp_path / "b.mar", members), tmp_path / "store")


def test_a_truncated_archive_is_one_line_saying_what_it_is_not_with_a_hint(tmp_path):
    whole = zip_archive(tmp_path / "whole.mar", GOOD)
    cut = tmp_path / "cut.mar"
    cut.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    with pytest.raises(ServerError) as caught:
        ModelFolder.open(cut, tmp_path / "store")
    message = caught.value.message
    assert (
        message
        == f"{cut} is not a readable model archive (neither a zip, as torch-model-archiver writes a .mar, nor a tar archive)."
    )
    assert "truncated or corrupt" in caught.value.hint
