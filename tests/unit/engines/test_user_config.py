"""A user's own model-config.yaml (--config-file): its keys reach context.model_yaml_config, and it wins."""

from __future__ import annotations

import pytest

from msnb.capture.cells import capture
from msnb.errors import OptionError
from msnb.options import handler_config, parse_handler_line
from msnb.trial import runner

READS_CONFIG = (
    "def handle(data, context):\n"
    "    if data is None:\n"
    "        return None\n"
    "    return [context.model_yaml_config['handler']['max_length'] for _ in data]\n"
)


def config_of(tmp_path, line: str, text: str) -> dict:
    (tmp_path / "model-config.yaml").write_text(text)
    return handler_config(parse_handler_line(line), {}, tmp_path)


def test_the_files_keys_reach_the_handler_and_win_over_the_options(tmp_path):
    text = "batchSize: 4\nmaxBatchDelay: 20\nhandler:\n  max_length: 8\nsequenceBatching: true\njobQueueSize: 7\n"
    config = config_of(tmp_path, "m --batch-size 2 --config-file model-config.yaml", text)
    spec = capture("m", READS_CONFIG, [], **config)
    cfg = spec.model_config()
    assert spec.batch_size == 4 and cfg["batchSize"] == 4, "the file wins over --batch-size"
    assert cfg["handler"] == {"max_length": 8} and cfg["sequenceBatching"] is True and cfg["jobQueueSize"] == 7
    assert cfg["responseTimeout"] == 120, "msnb fills the keys the file lacks"
    assert runner.predict_in_process(spec, [1]) == [8]


def test_msnbs_extra_file_archives_are_merged_into_the_files_system_section(tmp_path):
    (tmp_path / "deps.zip").write_bytes(b"")
    config = config_of(tmp_path, "m --config-file model-config.yaml --extra-files deps.zip", "system:\n  x: 1\n")
    cfg = capture("m", READS_CONFIG, [], **config).model_config()
    assert cfg["system"] == {"extraFiles": ["deps.zip"], "x": 1}


@pytest.mark.parametrize(
    "text, says",
    [
        ("a: [1, 2\nb: 3\n", "model-config.yaml: line 2: not YAML"),
        ("- 1\n- 2\n", "holds a list, not a mapping"),
    ],
)
def test_a_config_file_that_is_not_a_yaml_mapping_is_refused_naming_the_file(tmp_path, text, says):
    with pytest.raises(OptionError) as err:
        config_of(tmp_path, "m --config-file model-config.yaml", text)
    assert says in err.value.message and "YAML mapping" in err.value.hint


def test_a_missing_config_file_is_refused_naming_it(tmp_path):
    with pytest.raises(OptionError, match="nope.yaml' does not exist"):
        handler_config(parse_handler_line("m --config-file nope.yaml"), {}, tmp_path)
