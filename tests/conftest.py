import os
import warnings

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
warnings.filterwarnings("ignore", module="opacus")

import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(2)

TINY = dict(name="tiny-gpt2", vocab_size=512, n_embd=32, n_layer=2, n_head=2, max_len=32)


@pytest.fixture(scope="session")
def tiny_model_factory():
    from dpaudit.tasks.models import ModelSpec, build

    def make(seed: int = 0):
        return build(ModelSpec(**TINY, init_seed=seed))

    return make
