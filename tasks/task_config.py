"""A run's ``[task]``: which task, whose data, how much of it (a run config's section, and the record of it in
run.json that ``dpaudit evaluate`` reads back: both pass these checks)."""

from __future__ import annotations

from dataclasses import dataclass, fields

from dpaudit import checks, options
from dpaudit.errors import DpauditError


@dataclass(frozen=True)
class TaskConfig:
    name: str = "sentiment"
    source: str | None = None  # default: the task's bundled data (rotten-tomatoes, e2e-synthetic)
    n_train: int | None = None
    n_test: int | None = 500
    objective: str = "lm"
    seed: int = 0
    validation: int = 0  # > 0: evaluate on this many units held out from training, not on the test split
    columns: dict | None = None  # the task's field -> the data's column name (options.TASK_COLUMNS)

    def __post_init__(self):
        if self.name not in options.TASKS:
            raise DpauditError(f"task.name {self.name!r} unknown; choose one of {', '.join(options.TASKS)}")
        if self.source is None:
            object.__setattr__(self, "source", options.DEFAULT_SOURCE[self.name])
        if not isinstance(self.source, str) or not self.source:
            raise DpauditError(f"task.source must be a bundled source's name or a path (a string), got {self.source!r}")
        checks.seed("task.seed", self.seed)
        if self.objective not in options.OBJECTIVES:
            raise DpauditError(f"task.objective must be one of {', '.join(options.OBJECTIVES)}, got {self.objective!r}")
        if self.objective == "classifier" and self.name != "sentiment":
            raise DpauditError("task.objective = 'classifier' applies to task.name = 'sentiment' only")
        if not isinstance(self.validation, int) or isinstance(self.validation, bool) or self.validation < 0:
            raise DpauditError(f"task.validation must be an integer >= 0 (0 = evaluate on the test split), "
                               f"got {self.validation!r}")
        if self.columns is not None:
            fields = options.TASK_COLUMNS[self.name]
            if not isinstance(self.columns, dict) or not all(isinstance(v, str) and v for v in self.columns.values()):
                raise DpauditError('task.columns must be a table of column names, e.g. [task.columns] text = "review"')
            bad = sorted(set(self.columns) - set(fields))
            if bad:
                raise DpauditError(f"task.columns.{bad[0]} is not a field of task {self.name!r}; its fields are "
                                   f"{', '.join(fields)}")
            if self.source == options.DEFAULT_SOURCE[self.name]:
                raise DpauditError("task.columns applies to your own data (task.source); the bundled data has fixed columns")
        for k in ("n_train", "n_test"):
            v = getattr(self, k)
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
                raise DpauditError(f"task.{k} must be an integer >= 1, got {v!r}")


def from_record(task: dict, where: str = "run.json") -> TaskConfig:
    """The task a run record names, checked as a config's would be (a key this dpaudit does not know is left out:
    an older or newer record's own)."""
    if not isinstance(task, dict):
        raise DpauditError(f"{where}: task must be an object, got {type(task).__name__}")
    if "source" in task and not isinstance(task["source"], str):
        raise DpauditError(f"{where}: task.source must be a string (the data the model was trained on), got "
                           f"{task['source']!r}; restore the run record")
    known = {f.name for f in fields(TaskConfig)}
    try:
        return TaskConfig(**{k: v for k, v in task.items() if k in known})
    except DpauditError as e:
        raise DpauditError(f"{where}: {e}; restore the run record") from None
