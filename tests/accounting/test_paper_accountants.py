"""The accountant that calibrates σ is each method's paper's own unless [train] accountant names one
(options.PAPER_ACCOUNTANT), and the card records it as the claim's accountant."""

import pytest

from dpaudit import options
from dpaudit.run import config


def _eng(method: str, task: str = "sentiment", **train):
    d = {"task": {"name": task}, "train": {"method": method, **train}, "variants": [{"name": "v", "target_epsilon": 3}]}
    if method == "lmo_dp":
        d["train"]["lmo"] = {"accounting": "vector"}
    return config.parse(d).variants[0].trainer.engine


@pytest.mark.parametrize("method,task,expected", [
    ("dp_adam", "sentiment", "rdp"),        # Li et al.: σ by RDP
    ("dp_frost", "sentiment", "rdp"),       # Hong et al. §4.6: Opacus RDP
    ("user_dp_sgd", "userlm", "pld"),       # Chua et al.: dp_accounting PLD
    ("group_privacy", "userlm", "pld"),
])
def test_each_method_calibrates_with_its_papers_accountant(method, task, expected):
    assert options.PAPER_ACCOUNTANT[method] == expected
    assert _eng(method, task).accountant == expected
    assert _eng(method, task, accountant="prv").accountant == "prv"  # a config that names one keeps it


def test_a_variant_that_changes_method_gets_that_methods_default():
    cfg = config.parse({"task": {"name": "userlm"}, "train": {"method": "user_dp_sgd"},
                        "variants": [{"name": "u", "target_epsilon": 3},
                                     {"name": "r", "target_epsilon": 3, "method": "dp_adam"}]})
    assert [v.trainer.engine.accountant for v in cfg.variants] == ["pld", "rdp"]


def test_the_card_records_the_calibrating_accountant(tmp_path):
    import tomllib

    from dpaudit.trainers import fit
    from tests.settings import TINY_RUN

    cfg = config.parse(tomllib.loads(TINY_RUN))
    v = cfg.variants[-1]
    card = fit.privacy_card(v.trainer.engine, epsilon=3.0, delta=1e-5, method="dp_adam", trainable="full")
    assert card.claim.accountant == v.trainer.engine.accountant == "rdp"
