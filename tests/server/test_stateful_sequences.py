"""Stateful sequence batching as TorchServe's stateful example sets it up: `sequenceBatching` in the model-config given
with `--config-file`, a BaseHandler in eager mode keeping each sequence's state in an LRU keyed by
`context.get_sequence_id(idx)`, and requests carrying the `ts_request_sequence_id` header with a file's raw bytes
(`curl -H ... -T sample.txt`). Several sequences interleaved must get the same answers from msnb as from a plain
TorchServe serving the same files, and those answers are the plain computation: each sequence's running total
through the model."""

from __future__ import annotations

import threading

import pytest
import torch
from helpers import TS_STATEFUL_CONFIG, TS_STATEFUL_HANDLER, TS_STATEFUL_MODEL, build_mar, eager_files, make_notebook

from msnb.capture.notebook import load_handlers
from msnb.engines.models import PredictionError
from msnb.engines.raw_request import from_options
from msnb.session.deployment import deploy

SEQUENCES = {f"seq_{i}": [i + 1, 2 * i - 3, 5, -i, 7] for i in range(4)}


def ask_interleaved(server, name: str, folder) -> dict[str, list]:
    """Each sequence's numbers sent in order by its own client thread, as files with the sequence's header;
    the threads run side by side, so the server's batches mix the sequences."""
    answers: dict[str, list] = {}

    def client(sequence: str, numbers: list[int]) -> None:
        got = []
        for step, number in enumerate(numbers):
            sample = folder / f"{sequence}_{step}.txt"
            sample.write_text(str(number))
            request = from_options(f"@{sample}", None, [f"ts_request_sequence_id:{sequence}"], folder)
            got.append(server.predict(name, request))
        answers[sequence] = got

    threads = [threading.Thread(target=client, args=item) for item in SEQUENCES.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(240)
    return answers


def test_interleaved_sequences_keep_their_own_state_as_on_plain_torchserve(tmp_path, own_server):
    folder = tmp_path / "nb"  # the notebook's folder holds the files, as TorchServe's example folder does
    net, args = eager_files(folder, TS_STATEFUL_MODEL, "Scale")
    (folder / "model-config.yaml").write_text(TS_STATEFUL_CONFIG)
    args += ("--config-file", str(folder / "model-config.yaml"))
    own_server.register(build_mar(tmp_path / "plain", "stateful", TS_STATEFUL_HANDLER, extra_args=args))

    line = "%%ms_handler stateful2 --checkpoint w.pt --model-file Scale --config-file model-config.yaml"
    nb = make_notebook(folder, TS_STATEFUL_MODEL, f"{line}\n{TS_STATEFUL_HANDLER}", weights=False)
    (captured,) = load_handlers(nb, ["stateful2"])
    deploy(own_server, captured.spec)  # %ms_serve
    assert len(own_server.status("stateful2").workers) == 2  # the file's minWorkers

    truth = {}
    for sequence, numbers in SEQUENCES.items():
        totals = torch.tensor(numbers, dtype=torch.float32).cumsum(0)[:, None]
        truth[sequence] = [round(v, 4) for v in net(totals)[:, 0].tolist()]
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    assert ask_interleaved(own_server, "stateful", tmp_path / "a") == truth
    assert ask_interleaved(own_server, "stateful2", tmp_path / "b") == truth

    # the four sequences stay open (sequenceMaxIdleMSec): a fifth is over maxNumSequence, refused as TorchServe does
    fifth = from_options("1", None, ["ts_request_sequence_id:seq_4"], tmp_path)
    with pytest.raises(PredictionError) as refused:
        own_server.predict("stateful2", fifth)
    assert refused.value.status == 503 and "maxNumSequence" in refused.value.hint
