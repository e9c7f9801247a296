"""A tokenizer trained on local sentences and a tiny BERT built from a config, trained a few steps (no hub access).

The tests' Hugging Face objects, and their truth: ``logits(model, tokenizer, texts)`` is the plain transformers
call ``model(**tokenizer(texts, ...)).logits``, never an msnb path.
"""

from __future__ import annotations

import torch

SENTENCES = [
    ("a good movie with great acting", 1),
    ("a wonderful and moving film", 1),
    ("i loved the story and the music", 1),
    ("a bad film with a terrible plot", 0),
    ("boring slow and far too long", 0),
    ("i hated the ending and the acting", 0),
]
MAX_LENGTH = 16
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def train_tokenizer():
    """A WordPiece tokenizer trained on SENTENCES with ``tokenizers``, wrapped as PreTrainedTokenizerFast."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    backend.normalizer = normalizers.BertNormalizer(lowercase=True)
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    backend.train_from_iterator(
        [s for s, _ in SENTENCES], trainers.WordPieceTrainer(vocab_size=120, special_tokens=SPECIALS)
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]", sep_token="[SEP]"
    )


def tiny_bert(vocab_size: int, hidden: int = 32, layers: int = 2):
    """A BertForSequenceClassification built from a BertConfig (random weights, seeded)."""
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=vocab_size,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=2,
        intermediate_size=2 * hidden,
        max_position_embeddings=MAX_LENGTH * 2,
        num_labels=2,
    )
    return BertForSequenceClassification(config)


def encode(tokenizer, texts):
    return tokenizer(texts, padding="max_length", max_length=MAX_LENGTH, truncation=True, return_tensors="pt")


def train(model, tokenizer, steps: int = 3, lr: float = 1e-3) -> None:
    """A few optimizer steps on SENTENCES; the model is left in eval mode."""
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr)
    batch = encode(tokenizer, [s for s, _ in SENTENCES])
    labels = torch.tensor([y for _, y in SENTENCES])
    model.train()
    for _ in range(steps):
        optimizer.zero_grad()
        model(**batch, labels=labels).loss.backward()
        optimizer.step()
    model.eval()


def trained():
    """(tokenizer, model): the notebook's objects."""
    tokenizer = train_tokenizer()
    model = tiny_bert(tokenizer.vocab_size)
    train(model, tokenizer)
    return tokenizer, model


def logits(model, tokenizer, texts, keys=None) -> torch.Tensor:
    """The truth: the plain transformers call on the kernel's objects (``keys``: only those of the encoding)."""
    encoding = encode(tokenizer, list(texts))
    with torch.no_grad():
        return model(**{k: v for k, v in encoding.items() if keys is None or k in keys}).logits


# The cell that builds the PEFT model, as capture sees it (its value comes from the kernel).
LORA_POOL = [
    (
        "In [2]",
        "tokenizer = train_tokenizer()\nmodel = get_peft_model(tiny_bert(tokenizer.vocab_size), lora)\n"
        "train(model, tokenizer)\n",
    )
]


def lora_model(adapter_name: str = "default", dtype=torch.float32):
    """(tokenizer, the kernel's PEFT model): LoRA on query/value of the tiny BERT, the classifier head trained with
    it (peft's ``task_type="SEQ_CLS"``); as LORA_POOL's cell builds it."""
    from peft import LoraConfig, get_peft_model

    tokenizer, base = trained()
    config = LoraConfig(task_type="SEQ_CLS", r=4, lora_alpha=8, target_modules=["query", "value"])
    model = get_peft_model(base, config, adapter_name=adapter_name)
    train(model, tokenizer, steps=5, lr=0.05)
    return tokenizer, model.to(dtype)


# The natural handler cell of a notebook that trained a tokenizer and a model (issue 29's example), the cell that
# built them (the capture's cell pool) and texts with unknown words and an empty string.
HANDLER = """\
def init_function():
    return model

def preprocess(text):
    return tokenizer(text, padding="max_length", max_length=16, truncation=True, return_tensors="pt")

def postprocess(output):
    return {"logits": output["logits"].tolist()}
"""
POOL = [("In [2]", "tokenizer = train_tokenizer()\nmodel = tiny_bert(tokenizer.vocab_size)\ntrain(model, tokenizer)\n")]
TEXTS = ["a good movie with great acting", "zyzzyva quux never seen", "", "a terrible plot", "loved it"]
