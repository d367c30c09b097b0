import os

from dpaudit import offline

offline.setup()  # before transformers is imported anywhere

import pytest  # noqa: E402
import torch  # noqa: E402

from tests.settings import TINY  # noqa: E402

# `make test` runs the suite on pytest-xdist workers (one per core, at most 4): each worker's torch gets its share of
# the cores, so two workers on two cores do not oversubscribe them.
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
torch.set_num_threads(max(1, min(2, (os.cpu_count() or 1) // _WORKERS)))

@pytest.fixture(scope="session")
def tiny_model_factory():
    from dpaudit.tasks.models import ModelSpec, build

    def make(seed: int = 0):
        return build(ModelSpec(**TINY, init_seed=seed))

    return make


CONFIG = """
[task]
n_train = 200
n_test = 80
[model]
name = "tiny-gpt2"
vocab_size = 512
n_embd = 64
n_layer = 2
n_head = 2
max_len = 40
[canaries]
m = 60
repetitions = 4
[train]
gradient_canaries = 200
delta = 1e-5
epochs = 6
batch_size = 32
lr = 5e-3
[evaluate]
n_references = 200
enumerate_limit = 0  # sampled references: the whole-space trie is tested in test_exposure_trie.py
batch_size = 16  # several batches of canaries and references: test_shards splits them
[[variants]]
name = "non-private"
target_epsilon = inf
[[variants]]
name = "dp"
target_epsilon = 0.5
"""


@pytest.fixture(scope="session")
def run_dir(tmp_path_factory):
    """One end-to-end run for the whole session: under pytest-xdist the first worker to need it makes it (in the
    temporary folder every worker shares, under a file lock) and the others read it."""
    from filelock import FileLock

    from dpaudit.cli import main

    worker = os.environ.get("PYTEST_XDIST_WORKER")
    shared = tmp_path_factory.getbasetemp().parent if worker else tmp_path_factory.getbasetemp()
    d = shared / "e2e-session"
    with FileLock(str(shared / "e2e-session.lock")):
        if not (d / "done").exists():
            d.mkdir(exist_ok=True)
            (d / "cfg.toml").write_text(CONFIG)
            assert main(["run", str(d / "cfg.toml"), "--out", str(d / "out"), "--quiet"]) == 0
            (d / "done").write_text("ok\n")
    return d / "out"




def _working_tree() -> dict[str, str]:
    """Every changed or untracked path of the checkout (git's view, ignored files excluded) with a hash of
    its content: what a test must leave as it found it."""
    import hashlib
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    out = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all", "-z"], cwd=root,
                         capture_output=True, text=True)
    if out.returncode != 0:  # not a git checkout (an unpacked sdist): nothing to compare
        return {}
    state = {}
    for entry in filter(None, out.stdout.split("\0")):
        path = root / entry[3:]
        state[entry] = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else ""
    return state


@pytest.fixture(scope="session", autouse=True)
def working_tree_unchanged():
    """Tests write only under their tmp_path: the suite fails if the checkout changed while it ran."""
    before = _working_tree()
    yield
    after = _working_tree()
    changed = sorted(set(before.items()) ^ set(after.items()))
    assert not changed, f"the test suite changed the working tree: {sorted({c[0] for c in changed})[:10]}"


# --- the order the files run in (issue wave 5 · 5/5 item 3) ---------------------------------------------------------
# `make test` hands whole files to its workers (--dist=loadfile) in collection order, each to the next free worker.
# Handing out the longest files first (tests/durations.json, seconds per file from a recorded run) keeps one long
# file from starting last on one worker while the other sits idle; files not in the table count as short. The
# order changes nothing else: each file keeps its own tests' order. Re-record the table with
# `DPAUDIT_RECORD_DURATIONS=tests/durations.json make test` after files grow or move.
_DURATIONS = os.path.join(os.path.dirname(__file__), "durations.json")
_SPENT: dict[str, float] = {}


def pytest_collection_modifyitems(session, config, items):
    import json

    try:
        with open(_DURATIONS) as f:
            weight = {k: float(v) for k, v in json.load(f).items()}
    except (OSError, ValueError):
        return
    first = {}
    for i, item in enumerate(items):
        first.setdefault(item.nodeid.split("::")[0], i)
    items.sort(key=lambda it: (-weight.get(it.nodeid.split("::")[0], 0.0), first[it.nodeid.split("::")[0]]))


def pytest_runtest_logreport(report):
    if os.environ.get("DPAUDIT_RECORD_DURATIONS"):
        path = report.nodeid.split("::")[0]
        _SPENT[path] = _SPENT.get(path, 0.0) + float(report.duration)


def pytest_sessionfinish(session, exitstatus):
    out = os.environ.get("DPAUDIT_RECORD_DURATIONS")
    if out and _SPENT and not os.environ.get("PYTEST_XDIST_WORKER"):  # the controller sees every worker's reports
        import json

        with open(out, "w") as f:
            json.dump({k: round(v, 1) for k, v in sorted(_SPENT.items(), key=lambda kv: -kv[1])}, f, indent=0)
            f.write("\n")
