"""Settings the tests share: the tiny GPT-2 every fast test trains and scores, as a model spec and as config
sections (``from tests.settings import TINY_RUN``; the tests' folders are not packages)."""

TINY = dict(name="tiny-gpt2", vocab_size=512, n_embd=32, n_layer=2, n_head=2, max_len=32)
# the same model as a run config's [model] section, a 120/40 sentiment split with 20 canaries, exposure over
# sampled references
TINY_MODEL = "[model]\n" + "".join(f"{k} = {v!r}\n".replace("'", '"') for k, v in TINY.items())  # a config section
TINY_RUN = ("[task]\nn_train = 120\nn_test = 40\n" + TINY_MODEL + "[canaries]\nm = 20\n"
            + "[evaluate]\nenumerate_limit = 0\n")  # sampled references: the trie is tested in test_exposure_trie.py
