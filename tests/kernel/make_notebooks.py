"""Writes notebooks/*.ipynb from the cell sources below (run it after editing them; a test checks they agree)."""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat
from nbrun import PREDICTION_PREFIX  # every notebook prints its final TorchServe answer after it

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"

QUICKSTART = [
    (
        "md",
        "# msnb quickstart\n\nA small MLP: train it for a moment, write its handler in one cell, "
        "test it in a forked test process, build the `.mar`, serve it on a local TorchServe, ask it, stop the server.",
    ),
    ("code", "import json\n\nimport torch\n\ntorch.manual_seed(0);"),
    (
        "code",
        "class MLP(torch.nn.Module):\n"
        "    def __init__(self, hidden=16):\n"
        "        super().__init__()\n"
        "        self.net = torch.nn.Sequential(torch.nn.Linear(4, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 3))\n\n"
        "    def forward(self, x):\n"
        "        return self.net(x)",
    ),
    (
        "md",
        "Train briefly on synthetic data and save the weights next to the notebook. The training loop stays "
        "here: only `MLP` travels with the handler.",
    ),
    (
        "code",
        "model = MLP(16)\n"
        "x = torch.randn(256, 4)\n"
        "y = (x[:, 0] > 0).long() + (x[:, 1] > 0.5).long()\n"
        "optimizer = torch.optim.Adam(model.parameters(), lr=0.05)\n"
        "for step in range(60):\n"
        "    optimizer.zero_grad()\n"
        "    loss = torch.nn.functional.cross_entropy(model(x), y)\n"
        "    loss.backward()\n"
        "    optimizer.step()\n"
        'torch.save(model.state_dict(), "quickstart_mlp.pt")\n'
        'print(f"final loss {loss.item():.3f}")',
    ),
    ("code", "%load_ext msnb"),
    (
        "code",
        "%%ms_handler quickstart --checkpoint quickstart_mlp.pt --init-kwargs '{\"hidden\": 16}' "
        "--example '{\"x\": [0.5, -1.0, 2.0, 0.1]}'\n"
        "import torch\n\n"
        "def init_function(hidden=16):\n"
        "    return MLP(hidden)\n\n"
        "def preprocess(sample):\n"
        '    return torch.tensor(sample["x"], dtype=torch.float32)\n\n'
        "def postprocess(output):\n"
        "    probs = torch.softmax(output, dim=-1)\n"
        '    return {"label": int(probs.argmax()), "score": round(float(probs.max()), 4)}',
    ),
    ("code", "local = %ms_test quickstart\nlocal"),
    ("code", "%ms_build quickstart"),
    ("code", "server = %ms_serve quickstart"),
    (
        "code",
        "result = %ms_predict quickstart --data '{\"x\": [0.5, -1.0, 2.0, 0.1]}'\n"
        "assert result == local, (result, local)  # the same code path in the test process and in TorchServe\n"
        f"print({PREDICTION_PREFIX!r} + json.dumps(result, sort_keys=True))",
    ),
    ("code", "%ms_stop"),
]

TEXT_CLASSIFIER = [
    (
        "md",
        "# A text classifier: the handler pulls in a class, a vocabulary and a tokenizer from earlier cells\n\n"
        'Text in (a JSON string or `{"text": ...}`), `{"label", "score"}` out.',
    ),
    ("code", "import json\nimport re\n\nimport torch\n\ntorch.manual_seed(0);"),
    (
        "code",
        'VOCAB = {"<unk>": 0, "good": 1, "great": 2, "fun": 3, "bad": 4, "awful": 5, "boring": 6, '
        '"movie": 7, "the": 8, "was": 9}\n'
        'LABELS = ("negative", "positive")',
    ),
    (
        "code",
        "def tokenize(text):\n"
        '    return [VOCAB.get(word, VOCAB["<unk>"]) for word in re.findall(r"[a-z]+", text.lower())]\n\n\n'
        "def bag_of_words(text):\n"
        "    counts = torch.zeros(len(VOCAB))\n"
        "    for token in tokenize(text):\n"
        "        counts[token] += 1\n"
        "    return counts",
    ),
    (
        "code",
        "class TextClassifier(torch.nn.Module):\n"
        "    def __init__(self, vocab_size, n_labels=2):\n"
        "        super().__init__()\n"
        "        self.linear = torch.nn.Linear(vocab_size, n_labels)\n\n"
        "    def forward(self, counts):\n"
        "        return self.linear(counts)",
    ),
    (
        "code",
        'texts = ["good movie", "great fun", "the movie was great", "bad movie", "awful", "boring and bad"]\n'
        "targets = torch.tensor([1, 1, 1, 0, 0, 0])\n"
        "features = torch.stack([bag_of_words(t) for t in texts])\n"
        "classifier = TextClassifier(len(VOCAB))\n"
        "optimizer = torch.optim.SGD(classifier.parameters(), lr=0.5)\n"
        "for step in range(100):\n"
        "    optimizer.zero_grad()\n"
        "    loss = torch.nn.functional.cross_entropy(classifier(features), targets)\n"
        "    loss.backward()\n"
        "    optimizer.step()\n"
        'torch.save(classifier.state_dict(), "text_classifier.pt")',
    ),
    ("code", "%load_ext msnb"),
    (
        "code",
        '%%ms_handler sentiment --checkpoint text_classifier.pt --example \'{"text": "a great movie"}\'\n'
        "import torch\n\n"
        "def init_function():\n"
        "    return TextClassifier(len(VOCAB))\n\n"
        "def preprocess(sample):\n"
        "    if isinstance(sample, (bytes, bytearray)):\n"
        '        sample = sample.decode("utf-8")\n'
        '    text = sample["text"] if isinstance(sample, dict) else str(sample)\n'
        "    return bag_of_words(text)\n\n"
        "def postprocess(output):\n"
        "    probs = torch.softmax(output, dim=-1)\n"
        "    best = int(probs.argmax())\n"
        '    return {"label": LABELS[best], "score": round(float(probs[best]), 4)}',
    ),
    ("code", "%ms_test sentiment --data '\"the movie was awful\"'"),
    ("code", "%ms_build sentiment --dev"),
    ("code", "%ms_serve sentiment"),
    (
        "code",
        'result = %ms_predict sentiment --data \'{"text": "what a great fun movie"}\'\n'
        'assert result["label"] == "positive", result\n'
        f"print({PREDICTION_PREFIX!r} + json.dumps(result, sort_keys=True))",
    ),
    ("code", "%ms_stop"),
]

BYTES_BATCHING = [
    (
        "md",
        "# Raw bytes in, batching on, one bad request in the batch\n\n"
        "Each request is 8 float32 values as raw bytes (`application/octet-stream`). TorchServe batches up to 4 "
        "requests for 50 ms; a malformed request gets its own 400 while the rest of its batch succeeds.",
    ),
    ("code", "import json\n\nimport numpy as np\nimport torch\n\ntorch.manual_seed(0);"),
    (
        "code",
        "class Regressor(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.linear = torch.nn.Linear(8, 1)\n\n"
        "    def forward(self, x):\n"
        "        return self.linear(x).squeeze(-1)",
    ),
    (
        "code",
        "regressor = Regressor()\n"
        'torch.save(regressor.state_dict(), "regressor.pt")\n'
        "sample_bytes = np.arange(8, dtype=np.float32).tobytes()\n"
        "len(sample_bytes)",
    ),
    ("code", "%load_ext msnb"),
    (
        "code",
        "%%ms_handler regressor --checkpoint regressor.pt --batch-size 4 --max-batch-delay 50 --example sample_bytes\n"
        "import numpy as np\n"
        "import torch\n\n"
        "def init_function():\n"
        "    return Regressor()\n\n"
        "def preprocess(sample):\n"
        "    if not isinstance(sample, (bytes, bytearray)) or len(sample) != 32:\n"
        '        raise ValueError("expected 8 float32 values as 32 raw bytes")\n'
        "    return torch.from_numpy(np.frombuffer(bytes(sample), dtype=np.float32).copy())\n\n"
        "def postprocess(output):\n"
        '    return {"value": round(float(output), 4)}',
    ),
    ("code", "%ms_test regressor"),
    ("code", "%ms_build regressor --dev"),
    ("code", "server = %ms_serve regressor"),
    ("md", "Six requests at once; the third is 3 bytes of garbage."),
    (
        "code",
        "payloads = [np.full(8, i, dtype=np.float32).tobytes() for i in range(6)]\n"
        'payloads[2] = b"bad"\n'
        'answers = server.predict_many("regressor", payloads, return_exceptions=True)\n'
        "for i, answer in enumerate(answers):\n"
        '    print(i, f"error {answer.status}: {answer.message}" if isinstance(answer, Exception) else answer)\n'
        "assert 400 <= answers[2].status < 500, answers[2]\n"
        "assert all(isinstance(a, dict) for i, a in enumerate(answers) if i != 2), answers",
    ),
    (
        "code",
        "result = %ms_predict regressor --data sample_bytes\n"
        f"print({PREDICTION_PREFIX!r} + json.dumps(result, sort_keys=True))",
    ),
    ("code", "%ms_stop"),
]

HF_TEXT_CLASSIFIER = [
    (
        "md",
        "# Hugging Face objects travel: a tokenizer trained here, a tiny BERT built from its config\n\n"
        "No hub, no files to write: the handler uses the kernel's `tokenizer` and `model` by name. msnb saves "
        "them at capture (`save_pretrained`: safetensors and JSON, never a pickle) and the server loads them with "
        "their own class's `from_pretrained`. Every answer is compared with the notebook's own "
        "`model(**tokenizer(...)).logits`.",
    ),
    (
        "code",
        "import json\n\n"
        "import torch\n"
        "from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers\n"
        "from transformers import BertConfig, BertForSequenceClassification, PreTrainedTokenizerFast\n\n"
        "torch.manual_seed(0);",
    ),
    ("md", "A WordPiece tokenizer trained on a few local sentences, wrapped for `transformers`."),
    (
        "code",
        'sentences = ["a good movie with great acting", "a wonderful and moving film", "i loved the story and the music",\n'
        '             "a bad film with a terrible plot", "boring slow and far too long", "i hated the ending and the acting"]\n'
        "labels = torch.tensor([1, 1, 1, 0, 0, 0])\n"
        'backend = Tokenizer(models.WordPiece(unk_token="[UNK]"))\n'
        "backend.normalizer = normalizers.BertNormalizer(lowercase=True)\n"
        "backend.pre_tokenizer = pre_tokenizers.Whitespace()\n"
        'specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]\n'
        "backend.train_from_iterator(sentences, trainers.WordPieceTrainer(vocab_size=120, special_tokens=specials))\n"
        'tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]", pad_token="[PAD]")\n'
        "tokenizer.vocab_size",
    ),
    ("md", "A tiny BERT from a config (random weights), trained a few steps in the kernel."),
    (
        "code",
        "config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2, "
        "num_attention_heads=2,\n"
        "                    intermediate_size=64, max_position_embeddings=32, num_labels=2)\n"
        "model = BertForSequenceClassification(config)\n"
        'batch = tokenizer(sentences, padding="max_length", max_length=16, truncation=True, return_tensors="pt")\n'
        "optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)\n"
        "model.train()\n"
        "for step in range(20):\n"
        "    optimizer.zero_grad()\n"
        "    loss = model(**batch, labels=labels).loss\n"
        "    loss.backward()\n"
        "    optimizer.step()\n"
        "model.eval()\n"
        'print(f"final loss {loss.item():.3f}")',
    ),
    ("md", "The notebook's own answers, with unknown words and an empty string: what the server must return."),
    (
        "code",
        'texts = ["a wonderful film", "zyzzyva quux xylophone", "", "boring plot", "great acting and music"]\n'
        "with torch.no_grad():\n"
        '    expected = model(**tokenizer(texts, padding="max_length", max_length=16, truncation=True, '
        'return_tensors="pt")).logits\n'
        "expected",
    ),
    ("code", "%load_ext msnb"),
    (
        "code",
        "%%ms_handler bert_sentiment --batch-size 4\n"
        "def init_function():\n"
        "    return model                      # the kernel's trained model\n\n"
        "def preprocess(text):\n"
        '    return tokenizer(text, padding="max_length", max_length=16, truncation=True, return_tensors="pt")\n\n'
        "def postprocess(output):\n"
        '    logits = output["logits"]\n'
        '    return {"label": ["negative", "positive"][int(logits.argmax())], "logits": logits.tolist()}',
    ),
    (
        "code",
        "import msnb\n\n"
        'local = msnb.test_handler("bert_sentiment", texts)  # in a test process, in batches of 4 as the server runs them\n'
        'torch.testing.assert_close(torch.tensor([a["logits"] for a in local]), expected, atol=1e-4, rtol=0)\n'
        "local[0]",
    ),
    ("code", "server = %ms_serve bert_sentiment"),
    (
        "code",
        'served = server.predict_many("bert_sentiment", texts)  # concurrent clients: TorchServe batches them\n'
        'torch.testing.assert_close(torch.tensor([a["logits"] for a in served]), expected, atol=1e-4, rtol=0)\n'
        "result = %ms_predict bert_sentiment --data '\"zyzzyva quux xylophone\"'\n"
        'torch.testing.assert_close(torch.tensor(result["logits"]), expected[1], atol=1e-4, rtol=0)\n'
        f"print({PREDICTION_PREFIX!r} + json.dumps(result, sort_keys=True))",
    ),
    ("code", "%ms_stop"),
]

ALL = {
    "quickstart.ipynb": QUICKSTART,
    "text_classifier.ipynb": TEXT_CLASSIFIER,
    "bytes_batching.ipynb": BYTES_BATCHING,
    "hf_text_classifier.ipynb": HF_TEXT_CLASSIFIER,
}


def build(cells: list[tuple[str, str]]) -> nbformat.NotebookNode:
    """A notebook with these cells, no outputs, the python3 kernel; cell ids derived from positions (stable)."""
    nb = nbformat.v4.new_notebook()
    nb.metadata = {
        "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
        "language_info": {"name": "python"},
    }
    for i, (kind, source) in enumerate(cells):
        cell = nbformat.v4.new_markdown_cell(source) if kind == "md" else nbformat.v4.new_code_cell(source)
        cell.id = f"cell-{i}"
        nb.cells.append(cell)
    return nb


def render(name: str) -> str:
    return nbformat.writes(build(ALL[name])) + "\n"


def main() -> int:
    NOTEBOOKS.mkdir(exist_ok=True)
    for name in ALL:
        (NOTEBOOKS / name).write_text(render(name))
        print(f"wrote {NOTEBOOKS / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
