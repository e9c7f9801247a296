"""`msnb export` refuses a notebook's credentials as the magics do (one check, at capture): nothing is written; the
option line's --allow-secret lets a false positive through, and the export's layouts say where keys come from."""

from __future__ import annotations

from helpers import IMPORTS, NET, handler, make_notebook, run

from msnb.engines.kserve.layout import SECRETS_NOTE, kserve_config
from msnb.engines.ray.export import SECRETS_NOTE as RAY_NOTE
from msnb.engines.ray.export import _header
from msnb.spec import spec_from_source

AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/" + "bPxRfiCYzQ8vT2hL5k"
KEY_CELL = f'AWS_SECRET_ACCESS_KEY = "{AWS_SECRET}"\n'
USES = "\n\ndef aws_secret():\n    return AWS_SECRET_ACCESS_KEY\n"


def test_export_refuses_a_key_a_cell_above_the_handler_holds_and_writes_nothing(tmp_path, capsys):
    nb = make_notebook(tmp_path / "nb", IMPORTS, NET, KEY_CELL, handler("mlp") + USES)
    code, out, err = run(capsys, "export", nb, "-o", tmp_path / "out")
    assert code == 1
    assert (
        "error: mlp: The archive of 'mlp' would carry a secret from the notebook: line 1 of demo.ipynb, cell 3: " in err
    )
    assert "AWS Access Key (wJal..., 40 characters)" in err and AWS_SECRET not in err + out
    assert "Hint: read it on the server from the environment" in err and "--allow-secret AWS_SECRET_ACCESS_KEY" in err
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_export_lets_a_named_false_positive_through_and_warns(tmp_path, capsys):
    cell = handler("mlp", "--allow-secret AWS_SECRET_ACCESS_KEY") + USES
    nb = make_notebook(tmp_path / "nb", IMPORTS, NET, KEY_CELL, cell)
    code, _, err = run(capsys, "export", nb, "-o", tmp_path / "out")
    assert code == 0, err
    assert "warning: mlp: secret let through by --allow-secret AWS_SECRET_ACCESS_KEY: line 1 of demo.ipynb" in err
    assert (tmp_path / "out" / "mlp.mar").is_file()


def test_the_kserve_and_ray_layouts_say_where_a_key_comes_from():
    spec = spec_from_source("m", "import torch\n\ndef init_function():\n    return torch.nn.Identity()\n")
    assert SECRETS_NOTE in kserve_config([spec]) and "secretKeyRef" in SECRETS_NOTE
    assert RAY_NOTE in _header("serve run serve_config.yaml") and "secretKeyRef" in RAY_NOTE


def test_msnb_serve_env_goes_to_an_msnb_archive_and_a_foreign_one_is_refused(tmp_path, monkeypatch, capsys):
    import json

    import pytest
    from helpers import ECHO, build_mar

    from msnb.engines import env_vars
    from msnb.engines.torchserve import LocalServer
    from msnb.errors import OptionError
    from msnb.package import archive, formats

    server = LocalServer(tmp_path / "server")  # not started: the file is written before a register
    spec = spec_from_source("keyed", "import torch\n\ndef init_function():\n    return torch.nn.Identity()\n")
    ours = archive.build(spec, tmp_path / "out", fmt=formats.DEV_FORMAT)
    env_vars.give(server, ours, {"OPENAI_API_KEY": "from-the-shell"})
    assert json.loads((server.layout.env_dir / "keyed.json").read_text()) == {"OPENAI_API_KEY": "from-the-shell"}
    foreign = build_mar(tmp_path / "foreign", "echo", ECHO)
    with pytest.raises(OptionError, match=r"echo.mar has no msnb runtime \(msnb_runtime/handler/env.py\)") as caught:
        env_vars.give(server, foreign, {"OPENAI_API_KEY": "from-the-shell"})
    assert "Hint: export it again with this msnb" in caught.value.render()
    monkeypatch.delenv("MSNB_UNSET_VARIABLE", raising=False)
    code, _, err = run(capsys, "serve", ours, "--env", "MSNB_UNSET_VARIABLE")  # refused before a server starts
    assert code == 2 and "--env MSNB_UNSET_VARIABLE: it is not set" in err and "Hint:" in err
