"""`msnb export` takes only the notebook's own files: a path on an option line that leaves the notebook's folder is
refused unless the person exporting allows its folder, and a named file holding a secret never travels."""

from __future__ import annotations

import zipfile
from pathlib import Path

from helpers import handler, run, standard

KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----\n"


def fake_home(tmp_path: Path, monkeypatch) -> Path:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text(KEY)
    monkeypatch.setenv("HOME", str(home))
    return home


def test_an_ssh_key_and_etc_passwd_named_by_the_notebook_are_refused_and_nothing_is_written(
    tmp_path, capsys, monkeypatch
):
    fake_home(tmp_path, monkeypatch)
    cell = handler("mlp").replace("--checkpoint weights.pt", "--checkpoint ~/.ssh/id_ed25519 --extra-files /etc/passwd")
    nb = standard(tmp_path / "nb", cell)
    code, _, err = run(capsys, "export", nb, "-o", tmp_path / "out")
    assert code == 1
    assert "--checkpoint '~/.ssh/id_ed25519' is outside the notebook's folder" in err.replace(
        str(tmp_path / "home"), "~"
    )
    assert "--extra-files '/etc/passwd' is outside the notebook's folder" in err
    assert "Hint: move the file into the notebook's folder" in err and "--allow-files DIR" in err
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_allowing_a_folder_lets_its_plain_files_travel_but_never_a_secret(tmp_path, capsys, monkeypatch):
    home = fake_home(tmp_path, monkeypatch)
    shared = tmp_path / "shared"
    nb = standard(tmp_path / "nb")
    shared.mkdir()
    (nb.parent / "weights.pt").rename(shared / "weights.pt")
    (shared / "labels.txt").write_text("cat\ndog\n")
    cell = handler("mlp").replace("weights.pt", f"{shared}/weights.pt --extra-files {shared}/labels.txt")
    nb = standard(tmp_path / "nb", cell, weights=False)
    assert run(capsys, "export", nb, "-o", tmp_path / "refused")[0] == 1
    code, _, err = run(capsys, "export", nb, "-o", tmp_path / "out", "--allow-files", shared)
    assert code == 0, err
    with zipfile.ZipFile(tmp_path / "out" / "mlp.mar") as z:
        assert z.read("labels.txt") == b"cat\ndog\n"
        assert z.read("model.pt") == (shared / "weights.pt").read_bytes()
    key_cell = handler("mlp").replace("--checkpoint weights.pt", "--checkpoint ~/.ssh/id_ed25519")
    nb = standard(tmp_path / "nb2", key_cell)
    code, _, err = run(capsys, "export", nb, "-o", tmp_path / "out2", "--allow-files", home / ".ssh")
    assert code == 1 and "id_ed25519' a secret-looking name (id_*)" in err


def test_a_private_key_inside_the_notebook_folder_is_refused_as_checkpoint(tmp_path, capsys):
    nb = standard(tmp_path / "nb", handler("mlp").replace("weights.pt", "model.bin"))
    (nb.parent / "model.bin").write_text(KEY)
    code, _, err = run(capsys, "export", nb, "-o", tmp_path / "out")
    assert code == 1 and "--checkpoint" in err and "holds a secret (Private Key, line 1)" in err
    assert not (tmp_path / "out" / "mlp.mar").exists()
