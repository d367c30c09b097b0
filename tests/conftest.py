from dpaudit import offline

offline.setup()  # before transformers is imported anywhere

import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(2)

TINY = dict(name="tiny-gpt2", vocab_size=512, n_embd=32, n_layer=2, n_head=2, max_len=32)
# the same model as a run config's [model] section, and a 120/40 sentiment split with 20 canaries
TINY_RUN = ("[task]\nn_train = 120\nn_test = 40\n[model]\n"
            + "".join(f"{k} = {v!r}\n".replace("'", '"') for k, v in TINY.items()) + "[canaries]\nm = 20\n")


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
[[variants]]
name = "non-private"
target_epsilon = inf
[[variants]]
name = "dp"
target_epsilon = 0.5
"""


@pytest.fixture(scope="session")
def run_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("e2e")
    (d / "cfg.toml").write_text(CONFIG)
    from dpaudit.cli import main

    assert main(["run", str(d / "cfg.toml"), "--out", str(d / "out"), "--quiet"]) == 0
    return d / "out"


