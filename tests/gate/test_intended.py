"""Intended vs achieved (issue wave 5 · 4/5, item 1): a user trains for ε = 1 with Opacus'
make_private_with_epsilon and a bug halves the noise multiplier. The card Opacus' accountant gives is honest
(it records the σ that ran, ε ≈ 2.8), so the claim verifies and the audit passes; only the intent tells the bug
apart. card_from_opacus(intended_epsilon=...) records it, the report shows it, the default gate fails the run."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import torch
from opacus import PrivacyEngine
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from dpaudit.claim.card import card_from_dict
from dpaudit.claim.opacus_card import card_from_opacus
from dpaudit.cli import main
from dpaudit.errors import DpauditError
from dpaudit.gate import policy
from dpaudit.report import build
from dpaudit.report.markdown import render_markdown

pytestmark = pytest.mark.filterwarnings("ignore")
ROOT = Path(__file__).resolve().parents[2]
REPORT = ROOT / "reports" / "demo" / "dp-eps8" / "report" / "report.json"
N, B, EPOCHS = 400, 40, 2


def _opacus_card(bug: bool):
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(N, 4), torch.randint(0, 2, (N,)))
    model = nn.Linear(4, 2)
    engine = PrivacyEngine(accountant="prv")
    model, opt, loader = engine.make_private_with_epsilon(
        module=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
        data_loader=DataLoader(data, batch_size=B), target_epsilon=1.0, target_delta=1e-5, epochs=EPOCHS,
        max_grad_norm=1.0)
    if bug:
        opt.noise_multiplier /= 2  # the bug: half the noise the target needs
    for _ in range(EPOCHS):
        for x, y in loader:
            if len(x):
                opt.zero_grad()
                nn.functional.cross_entropy(model(x), y).backward()
                opt.step()
    return card_from_opacus(engine, loader, opt, delta=1e-5, intended_epsilon=1.0)


def _report(card) -> dict:
    r = copy.deepcopy(json.loads(REPORT.read_text()))
    r.update(build.claim_section(card))
    return r


def test_half_the_noise_passes_on_its_honest_card_and_fails_on_the_intent():
    honest, buggy = _opacus_card(False), _opacus_card(True)
    assert honest.claim.epsilon <= 1.0 + 1e-6 < 2.0 < buggy.claim.epsilon  # the card is what ran
    assert buggy.intended == {"epsilon": 1.0, "source": "card_from_opacus(intended_epsilon=...)"}
    rule = [f for f in policy.check(_report(buggy), policy.Policy()) if "trained for" in f]
    assert len(rule) == 1 and f"{buggy.claim.epsilon:.4g}" in rule[0] and "x the intended budget" in rule[0], rule
    assert not [f for f in policy.check(_report(honest), policy.Policy()) if "trained for" in f]
    off = policy.Policy(intended_tolerance=None)  # a policy may switch the rule off
    assert not [f for f in policy.check(_report(buggy), off) if "trained for" in f]
    md = render_markdown(_report(buggy), [])
    assert "**more privacy than intended**" in md and "Intended: ε = 1" in md
    assert "stays within it" in render_markdown(_report(honest), [])


def test_the_card_command_records_the_intent_and_the_gate_reads_it(tmp_path, capsys):
    args = ["card", "--epsilon", "2.785", "--delta", "1e-5", "--sigma", "1.2", "--sample-rate", "0.1", "--steps",
            "20", "--intended-epsilon", "1", "--out", str(tmp_path / "card.json")]
    assert main(args) == 0
    card = card_from_dict(json.loads((tmp_path / "card.json").read_text()))
    assert card.intended == {"epsilon": 1.0, "source": "dpaudit card --intended-epsilon"}
    path = tmp_path / "report.json"
    path.write_text(json.dumps(_report(card)))
    capsys.readouterr()
    assert main(["check", str(path)]) == 1
    assert "more than the epsilon 1 it was trained for" in capsys.readouterr().out


@pytest.mark.parametrize("bad", [{"epsilon": -1}, {"epsilon": "1"}, {"epsilon": 1, "source": 3}, 5])
def test_a_malformed_intent_is_refused(bad):
    d = _opacus_card(False).to_dict()
    d["extra"]["intended"] = bad
    with pytest.raises(DpauditError, match="extra.intended"):
        card_from_dict(d)


@pytest.mark.parametrize("bad", [True, 0.0, -1.0, float("nan"), "1"])
def test_card_from_opacus_refuses_an_intent_that_is_no_epsilon(bad):
    """intended_epsilon=True was recorded as ε = 1 (float(True)); 0 was dropped silently."""
    from dpaudit.claim.opacus_card import card_from_opacus

    with pytest.raises(DpauditError, match="intended_epsilon must be"):
        card_from_opacus(object(), None, None, delta=1e-5, intended_epsilon=bad)
