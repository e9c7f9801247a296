"""A user's own TorchServe handler (a BaseHandler subclass, a class answering image bytes, an MMS-style
module-level handle): exported from a notebook without running it, served on a real TorchServe, and
answering exactly what the in-process test answered."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import torch
from helpers import (
    ARCHIVER,
    IMPORTS,
    NET,
    OWN_BASE_HANDLER,
    OWN_CAPTUM_REPORT,
    OWN_FUNCTION,
    OWN_IMAGE_CLASS,
    TS_EAGER_HANDLER,
    TS_EAGER_MODEL,
    TS_MODULE_LEVEL,
    TS_NAMED_ENTRY,
    TS_SERVICE_OBJECT,
    TS_TEXT_MODEL,
    build_mar,
    eager_files,
    make_notebook,
    run,
    scripted_mlp,
    torch_packages,
)

from msnb.capture.cells import capture
from msnb.capture.local_code import search_path
from msnb.capture.notebook import load_handlers
from msnb.engines.raw_request import from_options
from msnb.package import archive
from msnb.session.deployment import deploy
from msnb.spec import SourceBlock
from msnb.trial import runner

INPUTS = {
    "clf": [{"x": [1, 2, 3, 4]}, {"x": [4, -3, 2, 1]}],
    "bg": [{"pixels": [[-3.0, 3.0, 0.5], [3.0, -3.0, -0.5]]}],
    "fn": [{"x": [0.5, -1.0, 2.0, 0.1]}],
}


def own_handler_notebook(folder):
    nb = make_notebook(
        folder,
        IMPORTS,
        NET,
        "%%ms_handler clf --checkpoint scripted.pt\n" + OWN_BASE_HANDLER,
        "%%ms_handler bg\n" + OWN_IMAGE_CLASS,
        "%%ms_handler fn\n" + OWN_FUNCTION,
        weights=False,
    )
    scripted_mlp(folder / "scripted.pt")
    return nb


def test_each_form_exported_without_running_is_served_with_the_in_process_answers(tmp_path, capsys, clean_server):
    nb = own_handler_notebook(tmp_path / "nb")
    code, out, err = run(capsys, "export", nb, "-o", tmp_path / "out")
    assert code == 0, err
    assert "your class Classifier" in out and "your class BackgroundRemover" in out and "your handle(data" in out
    specs = {c.spec.name: c.spec for c in load_handlers(nb)}
    for name, samples in INPUTS.items():
        local = runner.predict_in_process(specs[name], samples)
        clean_server.register(tmp_path / "out" / f"{name}.mar")
        served = [clean_server.predict(name, sample) for sample in samples]
        assert served == local, name
    assert served[0] == {"label": local[0]["label"]}
    assert clean_server.predict("bg", INPUTS["bg"][0]).startswith(b"P5 3 2 255\n")


def test_a_redeploy_of_an_own_handler_replaces_the_served_version(tmp_path, clean_server):
    specs = {c.spec.name: c.spec for c in load_handlers(own_handler_notebook(tmp_path / "nb"))}
    deploy(clean_server, specs["bg"])
    before = clean_server.predict("bg", INPUTS["bg"][0])
    changed = specs["bg"].replace(blocks=(SourceBlock(OWN_IMAGE_CLASS.replace("0.5", "0.9"), "edited cell"),))
    deploy(clean_server, changed)
    after = clean_server.predict("bg", INPUTS["bg"][0])
    assert before != after and after == runner.predict_in_process(changed, INPUTS["bg"])[0]
    assert before != after and after == runner.predict_in_process(changed, INPUTS["bg"])[0]


def test_a_handler_importing_captum_runs_on_the_servers_torch_and_its_model_folder_holds_none(tmp_path, clean_server):
    spec = capture("ct", OWN_CAPTUM_REPORT, [], search_path=search_path(tmp_path))
    assert [line.split("==")[0] for line in spec.requirements] == ["captum"], "captum requires torch: see below"
    mar = archive.build(spec, tmp_path / "store", fmt=archive.EXPORT_FORMAT)  # every pin, as `msnb export` writes
    clean_server.register(mar)
    answer = clean_server.predict("ct", {"x": 1})
    assert (answer["torch"], answer["file"]) == (torch.__version__, torch.__file__)
    assert (Path(answer["model_dir"]) / "venv").is_dir(), "TorchServe made the model venv (useVenv: true)"
    assert torch_packages(answer["model_dir"]) == []

    served = deploy(clean_server, spec.replace(name="ct2"))  # %ms_serve: the server is the kernel's environment
    answer = clean_server.predict(served.name, {"x": 1})
    assert (answer["torch"], answer["file"]) == (torch.__version__, torch.__file__)
    assert not (Path(answer["model_dir"]) / "venv").exists() and torch_packages(answer["model_dir"]) == []


def test_module_level_logger_lock_and_pattern_are_served_like_plain_torchserve_serves_the_same_file(
    tmp_path, capsys, clean_server
):
    truth = build_mar(tmp_path / "plain", "plain", TS_MODULE_LEVEL)  # torch-model-archiver --handler file.py
    clean_server.register(truth)
    nb = make_notebook(tmp_path / "nb", "%%ms_handler pasted\n" + TS_MODULE_LEVEL, weights=False)
    code, _, err = run(capsys, "export", nb, "-o", tmp_path / "out")  # the notebook file only: no kernel
    assert code == 0, err
    clean_server.register(tmp_path / "out" / "pasted.mar")
    for text in ("the cat and a dog", "A b c"):
        assert clean_server.predict("pasted", text) == clean_server.predict("plain", text)
    assert clean_server.predict("pasted", "the cat and a dog") == ["cat", "and"]


def test_entry_points_of_any_name_and_a_service_object_answer_like_plain_torchserve(tmp_path, capsys, clean_server):
    clean_server.register(build_mar(tmp_path / "p1", "named", TS_NAMED_ENTRY, entry="entry_point_function_name"))
    clean_server.register(build_mar(tmp_path / "p2", "service", TS_SERVICE_OBJECT))
    nb = make_notebook(
        tmp_path / "nb",
        "%%ms_handler named2\n" + TS_NAMED_ENTRY,
        "%%ms_handler service2\n" + TS_SERVICE_OBJECT,
        weights=False,
    )
    code, out, err = run(capsys, "export", nb, "-o", tmp_path / "out")
    assert code == 0, err
    assert "your entry_point_function_name(data, context)" in out
    for name in ("named", "service"):
        clean_server.register(tmp_path / "out" / f"{name}2.mar")
        for x in ([1, 2, 3], [0.5, -1, 4]):
            assert clean_server.predict(f"{name}2", {"x": x}) == clean_server.predict(name, {"x": x}), name
    torch.manual_seed(0)
    expected = [round(v, 5) for v in torch.nn.Linear(3, 2)(torch.tensor([1.0, 2.0, 3.0])).tolist()]
    assert clean_server.predict("named2", {"x": [1, 2, 3]}) == expected


def test_a_base_handler_in_eager_mode_is_served_like_plain_torchserve_serves_model_file_and_state_dict(
    tmp_path, capsys, clean_server
):
    plain = tmp_path / "plain"
    net, args = eager_files(plain)
    clean_server.register(build_mar(plain, "eager", TS_EAGER_HANDLER, extra_args=args))
    nb = make_notebook(
        tmp_path / "nb",
        TS_EAGER_MODEL,
        f"%%ms_handler eager2 --checkpoint {plain / 'w.pt'} --model-file TinyNet\n" + TS_EAGER_HANDLER,
        weights=False,
    )
    # the files sit beside the plain TorchServe archive, outside the notebook's folder: allowed by name
    code, _, err = run(capsys, "export", nb, "-o", tmp_path / "out", "--allow-files", plain)
    assert code == 0, err
    clean_server.register(tmp_path / "out" / "eager2.mar")
    for x in ([1, 2, 3, 4], [0.5, -1, 4, 2]):
        expected = [round(v, 4) for v in net(torch.tensor(x, dtype=torch.float32)).tolist()]
        assert clean_server.predict("eager2", {"x": x}) == clean_server.predict("eager", {"x": x}) == expected


def test_torchserves_default_text_classifier_by_name_is_served_like_plain_torchserve_serves_it(
    tmp_path, capsys, clean_server
):
    files = tmp_path / "files"
    net, eager = eager_files(files, TS_TEXT_MODEL, "TextClassificationModel", "model.pt")
    vocab = {w: i for i, w in enumerate(["a", "good", "movie", "a good", "good movie", "bad", "bad movie"])}
    torch.save(vocab, files / "source_vocab.pt")
    (files / "index_to_name.json").write_text(json.dumps({"0": "neg", "1": "pos"}))
    extra = f"{files / 'source_vocab.pt'},{files / 'index_to_name.json'}"
    subprocess.run(  # as TorchServe's README archives a default handler with an eager model
        [
            str(ARCHIVER),
            "--model-name",
            "news",
            "--version",
            "1.0",
            *eager,
            "--handler",
            "text_classifier",
            "--extra-files",
            extra,
            "--export-path",
            str(files),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    clean_server.register(files / "news.mar")
    line = (
        f"%%ms_handler news2 --handler text_classifier --checkpoint {files / 'model.pt'} "
        f"--extra-files {files / 'source_vocab.pt'} {files / 'index_to_name.json'}\n"
    )
    nb = make_notebook(tmp_path / "nb", line + TS_TEXT_MODEL, weights=False)
    code, _, err = run(capsys, "export", nb, "-o", tmp_path / "out", "--allow-files", files)
    assert code == 0, err
    clean_server.register(tmp_path / "out" / "news2.mar")
    for text in ("a good movie", "bad movie"):
        assert clean_server.predict("news2", text) == clean_server.predict("news", text)
    ids = torch.tensor([vocab[t] for t in ("a", "good", "movie", "a good", "good movie")])
    probs = torch.softmax(net(ids, torch.tensor([0])), 1)[0].tolist()
    answer = clean_server.predict("news2", "a good movie")
    assert answer == pytest.approx({"neg": probs[0], "pos": probs[1]})


READS_CONFIG = """
def handle(data, context):
    if data is None:
        return None
    settings = context.model_yaml_config["handler"]
    return [{"mode": settings["save_mode"], "n": settings["max_length"], "batch": len(data)} for _ in data]
"""


def test_a_handler_reading_its_model_config_section_answers_like_plain_torchserve_with_the_same_file(
    tmp_path, capsys, clean_server
):
    config = tmp_path / "model-config.yaml"
    config.write_text("handler:\n  save_mode: pretrained\n  max_length: 8\nmaxBatchDelay: 5\n")
    clean_server.register(build_mar(tmp_path / "plain", "cfg", READS_CONFIG, extra_args=("--config-file", str(config))))
    nb = make_notebook(tmp_path / "nb", f"%%ms_handler cfg2 --config-file {config}\n" + READS_CONFIG, weights=False)
    code, _, err = run(capsys, "export", nb, "-o", tmp_path / "out")
    assert code == 0, err
    clean_server.register(tmp_path / "out" / "cfg2.mar")
    assert clean_server.predict("cfg2", {"x": 1}) == clean_server.predict("cfg", {"x": 1})
    assert clean_server.predict("cfg2", {"x": 1}) == {"mode": "pretrained", "n": 8, "batch": 1}


RAW = """
def handle(data, context):
    if data is None:
        return None
    out = []
    for i, row in enumerate(data):
        body = row.get("body") or row.get("data")
        kind = type(body).__name__
        text = body.decode() if isinstance(body, (bytes, bytearray)) else body
        out.append({"kind": kind, "text": text, "seq": context.get_request_header(i, "ts_request_sequence_id")})
    return out
"""


def test_a_files_raw_bytes_and_headers_reach_the_handler_as_curl_sends_them(tmp_path, clean_server):
    spec = capture("raw", RAW, [])
    deploy(clean_server, spec)
    sample = tmp_path / "sample.txt"
    sample.write_text('{"x": 1}')  # text that parses as JSON: still sent as the file's bytes
    raw = from_options(f"@{sample}", None, ["ts_request_sequence_id:seq-1"], tmp_path)
    assert clean_server.predict("raw", raw) == {"kind": "bytearray", "text": '{"x": 1}', "seq": "seq-1"}
    as_json = clean_server.predict("raw", {"x": 1})
    assert as_json["kind"] == "dict" and as_json["seq"] is None
