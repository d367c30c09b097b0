"""E2E-style table-to-text (Li et al.'s generation task), generated with a seed since no E2E data ships
on PyPI; real E2E/DART data loads from any source of tasks/data_source.py (columns ``table``, ``mr`` or
``meaning_representation``, and ``reference``, ``ref`` or ``human_reference``, or named by ``[task.columns]``;
rows with the same MR are grouped as references).

Record format (Li et al.'s code): ``BOS {table} EOS {text} EOS`` with the loss on the text only.
Decoding: beam search, 5 beams (App. K). Metrics over test MRs (references grouped per MR): BLEU,
NIST, METEOR (when WordNet is installed), ROUGE-L and CIDEr (:mod:`.nlg_metrics`).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
import torch

from dpaudit.errors import DpauditError
from dpaudit.options import TASK_COLUMNS
from dpaudit.tasks import data_source
from dpaudit.tasks.splits import fingerprint, holdout
from dpaudit.tokens import frame, model_device

SLOTS = ("name", "eatType", "food", "priceRange", "customer rating", "area", "familyFriendly", "near")
_ADJ = ["Blue", "Golden", "Red", "Green", "Old", "Little", "Royal", "Silver", "Wild", "Happy", "Black", "Brave"]
_NOUN = ["Eagle", "Spice", "Lion", "Rice Boat", "Phoenix", "Mill", "Wrestlers", "Punter", "Cricketers", "Vaults",
         "Plough", "Dragon"]
VALUES = {
    "eatType": ["restaurant", "coffee shop", "pub"],
    "food": ["French", "Italian", "Chinese", "Indian", "Japanese", "English", "Fast food"],
    "priceRange": ["cheap", "moderate", "high", "less than £20", "£20-25", "more than £30"],
    "customer rating": ["low", "average", "high", "1 out of 5", "3 out of 5", "5 out of 5"],
    "area": ["city centre", "riverside"],
    "familyFriendly": ["yes", "no"],
    "near": ["Café Rouge", "Burger King", "The Bakers", "Raja Indian Cuisine", "Express by Holiday Inn",
             "Crowne Plaza Hotel", "The Portland Arms", "All Bar One", "Ranch", "Clare Hall"],
}
N_REFS = 3


@dataclass(frozen=True)
class TableData:
    train: list[dict]  # {"mr": str, "text": str}, one per (MR, reference)
    test: list[dict]  # {"mr": str, "refs": [str, ...]}, one per MR
    source: str

    def fingerprint(self) -> str:
        return fingerprint([f"{ex['mr']}\t{ex['text']}" for ex in self.train]
                           + [f"{ex['mr']}\t{'|'.join(ex['refs'])}" for ex in self.test])


def _mr_string(slots: dict) -> str:
    return ", ".join(f"{k}[{v}]" for k, v in slots.items())


def _realise(slots: dict, rng: np.random.Generator) -> str:
    """One reference text for an MR: templates, clause order and wording drawn at random."""
    n, et = slots["name"], slots["eatType"]
    first = [f"{n} is a {et}", f"There is a {et} called {n}", f"{n} is a {et} place", f"The {et} {n}"]
    parts = [first[rng.integers(len(first))]]
    clauses = []
    if "food" in slots:
        clauses.append(rng.choice([f"serving {slots['food']} food", f"that serves {slots['food']} food",
                                   f"offering {slots['food']} cuisine"]))
    if "priceRange" in slots:
        clauses.append(rng.choice([f"with a {slots['priceRange']} price range", f"with prices {slots['priceRange']}"])
                       if "£" in slots["priceRange"] else
                       rng.choice([f"in the {slots['priceRange']} price range", f"with {slots['priceRange']} prices"]))
    if "customer rating" in slots:
        clauses.append(rng.choice([f"rated {slots['customer rating']} by customers",
                                   f"with a {slots['customer rating']} customer rating"]))
    if "area" in slots:
        clauses.append(rng.choice([f"in the {slots['area']}", f"located in the {slots['area']} area"]))
    if "near" in slots:
        clauses.append(rng.choice([f"near {slots['near']}", f"close to {slots['near']}"]))
    order = rng.permutation(len(clauses))
    text = parts[0] + ("" if not clauses else " " + ", ".join(clauses[i] for i in order))
    text += "."
    if "familyFriendly" in slots:
        kid = slots["familyFriendly"] == "yes"
        text += " " + str(rng.choice(["It is family friendly.", "Children are welcome."] if kid else
                                     ["It is not family friendly.", "It is not suitable for children."]))
    return text


def generate(n_mrs: int, seed: int = 0) -> list[tuple[str, list[str]]]:
    rng = np.random.default_rng([seed, 1701])
    names = [f"The {a} {b}" for a in _ADJ for b in _NOUN]
    out: OrderedDict[str, list[str]] = OrderedDict()
    while len(out) < n_mrs:
        slots = {"name": names[rng.integers(len(names))], "eatType": str(rng.choice(VALUES["eatType"]))}
        for k in SLOTS[2:]:
            if rng.random() < 0.55:
                slots[k] = str(rng.choice(VALUES[k]))
        mr = _mr_string(slots)
        if mr not in out:
            refs: list[str] = []
            while len(refs) < N_REFS:
                r = _realise(slots, rng)
                if r not in refs or len(refs) > 10:
                    refs.append(r)
            out[mr] = refs
    return list(out.items())


def load(source: str = "e2e-synthetic", n_train: int | None = None, n_test: int | None = None, seed: int = 0,
         test_fraction: float = 0.1, validation: int = 0, columns: dict | None = None) -> TableData:
    """``n_train``/``n_test``/``validation`` count meaning representations (each has several references);
    ``validation`` > 0 evaluates on MRs held out from training instead of the test split (tasks/splits.py).
    ``source`` is ``e2e-synthetic`` or any source of tasks/data_source.py with a table and a reference column
    (``columns`` renames them); rows with the same table are one MR with several references."""
    if source == "e2e-synthetic":
        if columns:
            raise DpauditError("task.columns applies to your own data; the bundled e2e-synthetic has fixed columns")
        n_tr = n_train or 1500
        n_te = n_test or 150
        v = validation if isinstance(validation, int) and validation > 0 else 0
        groups = generate(n_tr + n_te + v, seed)  # validation MRs after the test MRs: the test split is unchanged
        train_g, test_g = groups[:n_tr] + groups[n_tr + n_te:], groups[n_tr:n_tr + n_te]
    else:
        got = data_source.read(source, TASK_COLUMNS["table2text"], columns, "table-to-text data")
        if got.test is None:
            groups = _group(got.train)
            rng = np.random.default_rng(seed)
            idx = rng.permutation(len(groups))
            k = int(round(test_fraction * len(groups)))
            test_g = [groups[i] for i in idx[:k]]
            train_g = [groups[i] for i in idx[k:]]
        else:
            train_g, test_g = _group(got.train), _group(got.test)
    train_g, test_g = holdout(train_g, test_g, validation, n_test, "meaning representations")
    train_g = train_g[: n_train or None]
    train = [{"mr": mr, "text": t} for mr, refs in train_g for t in refs]
    test = [{"mr": mr, "refs": refs} for mr, refs in test_g]
    if not train:
        raise DpauditError(f"the training split of {source} is empty; check the data or task.n_train")
    if not test:
        raise DpauditError(f"the test split of {source} is empty; check the data or task.n_test")
    return TableData(train, test, source)


def _group(rows: list[dict]) -> list[tuple[str, list[str]]]:
    groups: OrderedDict[str, list[str]] = OrderedDict()
    for r in rows:
        groups.setdefault(str(r["table"]), []).append(str(r["reference"]))
    return list(groups.items())


def prompt_ids(mr: str, tok, max_len: int | None = None) -> list[int]:
    """BOS table EOS; a table longer than half the context is cut (the same way in training and decoding)."""
    body = tok(mr, add_special_tokens=False).input_ids
    if max_len is not None:
        body = body[: max(1, max_len // 2 - 2)]
    return frame(tok, body)


def encode_example(ex: dict, tok, objective: str, max_len: int) -> dict:
    """BOS table EOS text EOS; the loss covers the text and its EOS only (objective is always 'lm' here)."""
    p = prompt_ids(ex["mr"], tok, max_len)
    t = tok(" " + ex["text"], add_special_tokens=False).input_ids + [tok.eos_token_id]
    ids = (p + t)[:max_len]
    targets = ([-100] * len(p) + t)[:max_len]
    return {"input_ids": ids, "targets": targets}


@torch.inference_mode()
def generate_texts(model, tok, mrs: list[str], max_new_tokens: int | None = None, num_beams: int = 5,
                   max_len: int = 128) -> list[str]:
    """Beam search from ``BOS table EOS`` until EOS or until the context (max_len, the training length) is full,
    as Li et al. decode (their max_seq_len bounds prompt + text). ``max_new_tokens`` caps it further if given."""
    model.eval()
    device = model_device(model)
    out = []
    for mr in mrs:
        ids = torch.tensor([prompt_ids(mr, tok, max_len)], device=device)
        budget = max(1, max_len - ids.size(1) if max_new_tokens is None else min(max_new_tokens, max_len - ids.size(1)))
        gen = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=budget,
                             num_beams=num_beams, do_sample=False, eos_token_id=tok.eos_token_id,
                             pad_token_id=tok.pad_token_id, early_stopping=True)
        out.append(tok.decode(gen[0, ids.size(1):], skip_special_tokens=True).strip())
    return out


def score(hyps: list[str], refs: list[list[str]]) -> dict:
    from dpaudit.tasks import nlg_metrics

    return nlg_metrics.score(hyps, refs)


def metrics(model, tok, test: list[dict], batch_size: int = 64, max_len: int = 128, num_beams: int = 5) -> dict:
    hyps = generate_texts(model, tok, [e["mr"] for e in test], num_beams=num_beams, max_len=max_len)
    return {**score(hyps, [e["refs"] for e in test]), "n_test": len(test), "task": "table2text",
            "decoding": f"beam search, {num_beams} beams", "examples": [
                {"mr": e["mr"], "generated": h, "reference": e["refs"][0]} for e, h in list(zip(test, hyps))[:3]]}
