"""Tasks by name. A task module provides ``load(source, n_train, n_test, seed, validation=0, columns=None)`` (an object with
``train``, ``test``, ``source`` and ``fingerprint()``), ``encode_example(ex, tokenizer, objective,
max_len)`` and ``metrics(model, tokenizer, test, batch_size, max_len)``; adding a task is one module and
one line here."""

from __future__ import annotations

from dpaudit.errors import DpauditError
from dpaudit.options import DEFAULT_SOURCE  # noqa: F401 - read as registry.DEFAULT_SOURCE
from dpaudit.options import TASKS as TASK_NAMES
from dpaudit.tasks import sentiment, table2text, userlm

TASKS = {"sentiment": sentiment, "table2text": table2text, "userlm": userlm}
assert tuple(TASKS) == TASK_NAMES, "dpaudit.options.TASKS and the task registry disagree"


def get(name: str):
    if name not in TASKS:
        raise DpauditError(f"unknown task {name!r}; choose one of {', '.join(TASKS)}")
    return TASKS[name]


def load_data(task: dict):
    """The data a run config's ``[task]`` (as recorded in run.json) names: training split and evaluation split
    (the test split, or with ``validation`` set a split held out from training, see tasks/splits.py)."""
    from dpaudit.tasks.task_config import from_record

    t = from_record(task)  # a run.json can be anyone's file: its task is checked as a config's is
    return get(t.name).load(t.source, t.n_train, t.n_test, t.seed, validation=t.validation, columns=t.columns)
