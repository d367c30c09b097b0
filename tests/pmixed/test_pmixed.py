"""PMixED: the paper's own accounting against its printed numbers, the mixing against brute force, the
two-token counterexample to the per-query claim, the exact audit on mechanisms whose privacy is known, the
budget across processes, and a tiny deployment end to end."""

import itertools
import json
import math
import subprocess
import sys
from multiprocessing import get_context

import numpy as np
import pytest
import torch
from scipy.optimize import brentq

from dpaudit.accounting import pmixed_rdp as P
from dpaudit.audit.rows import CheckRow, MechanismEvidence
from dpaudit.errors import DpauditError
from dpaudit.pmixed import audit, mixing
from dpaudit.pmixed.deployment import PMixedSpec, check_decoding, partition_of
from dpaudit.pmixed.ledger import BudgetExhausted, Ledger
from tests.pmixed import ledger_spend


def L(v):
    return torch.log(torch.tensor(v, dtype=torch.float64))


def test_budget_inversion_matches_the_papers_code():
    # eps_G = 8, delta = 1e-5, alpha = 3 -> eps_RDP = 3.198, 0.003123 per query at T = 1024 (brief B1)
    b = P.rdp_budget(8.0, 1e-5, 3)
    assert b == pytest.approx(3.198, abs=5e-4)
    assert b / 1024 == pytest.approx(0.003123, abs=1e-6)
    assert P.to_epsilon(b, 1e-5, 3) == pytest.approx(8.0, abs=1e-12)


def test_beta_per_subset_size_reproduces_the_brief_table():
    per_query = P.rdp_budget(8.0, 1e-5, 3) / 1024
    want = {1: 0.397, 2: 0.126, 3: 0.142, 5: 0.163, 10: 0.192}
    for n, b in want.items():
        got = P.beta_star(3, 0.03, n, per_query)
        assert got == pytest.approx(b, abs=1e-3)
        assert P.base_loss(3, got, n) == pytest.approx(1.191, abs=1e-3)  # the same base loss at every n
        assert P.subsampled(3, 0.03, got, n) <= per_query  # the feasible side of the bisection
    assert P.beta_no_subsampling(80, 3, per_query) == pytest.approx(0.0169, abs=1e-4)
    # beta really depends on |S_t| (the neighbouring world has one model fewer): not one constant
    assert len({round(P.beta_star(3, 0.03, n, per_query), 6) for n in (1, 2, 3)}) == 3


def test_subsampled_bound_against_the_printed_formula():
    a, q, beta, n = 4, 0.05, 0.02, 3
    eps = {k: P.base_loss(k, beta, n) for k in range(2, a + 1)}
    direct = (1 - q) ** (a - 1) * (1 + (a - 1) * q) + sum(
        math.comb(a, k) * (1 - q) ** (a - k) * q ** k * math.exp((k - 1) * eps[k]) for k in range(2, a + 1))
    assert P.subsampled(a, q, beta, n, reading="theorem") == pytest.approx(math.log(direct) / (a - 1), rel=1e-12)
    # the code's reading puts eps(alpha) everywhere: larger, so a smaller beta
    assert P.subsampled(a, q, beta, n, reading="code") > P.subsampled(a, q, beta, n, reading="theorem")


def test_renyi_is_exact_with_zeros_and_never_nan():
    p, q = np.array([0.2, 0.5, 0.3, 0.0]), np.array([0.1, 0.6, 0.2, 0.1])
    want = math.log(np.sum(p[:3] ** 3 * q[:3] ** -2)) / 2
    assert float(mixing.renyi(L(p.tolist()), L(q.tolist()), 3)) == pytest.approx(want, rel=1e-12)
    assert math.isinf(float(mixing.renyi(L(q.tolist()), L(p.tolist()), 3)))  # mass where the other has none
    assert float(mixing.renyi(L(p.tolist()), L(p.tolist()), 3)) == pytest.approx(0.0, abs=1e-15)


def _random_dists(n, V, seed, scale=3.0):
    g = torch.Generator().manual_seed(seed)
    lp0 = torch.log_softmax(torch.randn(V, generator=g, dtype=torch.float64) * scale, -1)
    lps = torch.log_softmax(lp0 + torch.randn(n, V, generator=g, dtype=torch.float64) * scale, -1)
    return lp0, lps


def test_lambda_is_the_largest_feasible_value_never_above_it():
    lp0, lps = _random_dists(6, 50, 0)
    for radius in (1e-4, 0.01, 0.3):
        lam = mixing.solve_lambda(lps, lp0, radius, 3)
        for i in range(6):
            d = float(mixing.sym_renyi(mixing.mollify(lps[i], lp0, lam[i]), lp0, 3))
            assert d <= radius  # never infeasible (the paper's code does not clamp)
            def f(x, i=i, radius=radius):
                lam_x = torch.tensor(x, dtype=torch.float64)
                return float(mixing.sym_renyi(mixing.mollify(lps[i], lp0, lam_x), lp0, 3)) - radius

            if f(1.0) > 0:
                assert float(lam[i]) == pytest.approx(brentq(f, 0.0, 1.0, xtol=1e-15), abs=1e-9)
            else:
                assert float(lam[i]) == 1.0


def test_two_token_counterexample_breaks_the_per_query_claim():
    """Brief B2.1: p0 = (1e-9, 1 - 1e-9), the canary's model (0.5, 0.5), the other (1e-12, 1 - 1e-12), |S| = 2,
    beta = 0.126: D_3(p || p_-i) = 5.93 against the claimed 1.19 (the triangle inequality needs every order)."""
    p0, pi, pj = L([1e-9, 1 - 1e-9]), L([0.5, 0.5]), L([1e-12, 1 - 1e-12])
    beta, a = 0.126, 3
    lam = mixing.solve_lambda(torch.stack([pi, pj]), p0, beta * a, a)
    assert float(lam[0]) == pytest.approx(2.08e-6, rel=1e-2) and float(lam[1]) == 1.0
    d = audit.conditional(torch.stack([pi, pj]), p0, beta, a, 0)
    claimed = P.base_loss(a, beta, 2)
    assert claimed == pytest.approx(1.189, abs=1e-3)
    assert d == pytest.approx(5.93, abs=0.01) and d > 4.9 * claimed
    pair = float(mixing.renyi(mixing.mollify(pi, p0, lam[0]), mixing.mollify(pj, p0, lam[1]), a))
    assert pair == pytest.approx(6.97, abs=0.01) and pair > 4 * beta * a  # Thm C.5's 4 beta alpha = 1.51


def _brute_marginal(lps, lp0, betas, a, q):
    n = lps.shape[0]
    out = torch.zeros_like(lp0)
    for S in itertools.product([0, 1], repeat=n):
        members = [i for i in range(n) if S[i]]
        w = q ** len(members) * (1 - q) ** (n - len(members))
        if not members:
            out += w * torch.exp(lp0)
            continue
        lam = mixing.solve_lambda(lps[members], lp0, betas[len(members) - 1] * a, a)
        out += w * torch.exp(mixing.mixture(lps[members], lp0, lam))
    return torch.log(out)


def test_marginal_and_leave_one_out_against_enumerating_every_subset():
    lp0, lps = _random_dists(4, 30, 1)
    betas, a, q = [0.05, 0.02, 0.03, 0.04], 3, 0.3
    lam = mixing.lambda_table(lps, lp0, betas, a)
    assert torch.allclose(mixing.marginal(lps, lp0, lam, q), _brute_marginal(lps, lp0, betas, a, q), atol=1e-12)
    d = audit.query_divergences(lp0, lps, betas, a, q)
    for i in range(4):
        keep = [j for j in range(4) if j != i]
        want = mixing.sym_renyi(_brute_marginal(lps, lp0, betas, a, q), _brute_marginal(lps[keep], lp0, betas, a, q), a)
        assert float(d[i]) == pytest.approx(float(want), rel=1e-9)


def test_exact_audit_finds_a_leak_and_invents_none():
    lp0, lps = _random_dists(4, 40, 2)
    a, q = 3, 0.5
    # models equal to the public one: removing a partition changes nothing, exactly
    assert float(audit.query_divergences(lp0, lp0.expand(4, -1), [0.1] * 4, a, q).max()) == pytest.approx(0, abs=1e-12)
    # no mollification (radius huge: lambda = 1): the per-query divergence is large and the PLD bound sees it
    leak = audit.query_divergences(lp0, lps, [50.0] * 4, a, q)
    small = audit.query_divergences(lp0, lps, [1e-4] * 4, a, q)
    assert float(leak.max()) > 100 * float(small.max())
    # and a tight radius keeps every query within the paper's claim for that radius on this benign example
    assert float(small.max()) <= P.subsampled(a, q, 1e-4, 4) * 1.0001


def test_repeated_query_epsilon_on_randomized_response():
    eps = 1.0
    p = np.log([math.exp(eps) / (1 + math.exp(eps)), 1 / (1 + math.exp(eps))])
    got = audit.repeated_query_epsilon(p, p[::-1].copy(), 1, 0.0)
    assert eps - 2e-3 <= got <= eps + 1e-12  # the optimistic PLD rounds down, never up
    # k answers of randomized response: exact epsilon at delta from the binomial privacy loss
    k, delta = 10, 1e-3
    got = audit.repeated_query_epsilon(p, p[::-1].copy(), k, delta)
    from scipy.stats import binom

    pp = math.exp(eps) / (1 + math.exp(eps))
    j = np.arange(k + 1)
    loss = (2 * j - k) * eps  # j agreeing answers

    def d_of(e):
        return float(np.sum(binom.pmf(j, k, pp) * np.maximum(0, 1 - np.exp(e - loss))))

    exact = brentq(lambda e: d_of(e) - delta, 0, k * eps)
    assert exact - 0.05 <= got <= exact + 1e-9


def test_ledger_refuses_query_T_plus_one_and_spends_nothing_then(tmp_path):
    led = Ledger.create(tmp_path, 5)
    assert list(led.reserve(3)) == [0, 1, 2]
    with pytest.raises(BudgetExhausted, match="3 of T = 5 queries spent, 2 left, 3 asked"):
        led.reserve(3)
    assert led.state()["spent"] == 3
    led.reserve(2)
    with pytest.raises(BudgetExhausted):
        led.reserve(1)
    (tmp_path / "ledger.json").write_text("{broken")
    with pytest.raises(DpauditError, match="corrupt ledger"):
        led.reserve(1)


def test_a_ledger_edited_to_a_larger_budget_is_refused(tmp_path):
    """The budget is the deployment's T (pmixed.json); a ledger raised by an edit answers nothing."""
    import json

    (tmp_path / "pmixed.json").write_text(json.dumps({"schema_version": 1, "spec": {"queries": 100}}))
    Ledger.create(tmp_path, 100)
    led = Ledger.of_deployment(tmp_path)
    assert led.budget == 100 and led.remaining == 100
    led.reserve(100)
    (tmp_path / "ledger.json").write_text(json.dumps({"queries": 105, "spent": 100}))
    with pytest.raises(DpauditError, match="budget T = 105 is not the deployment's T = 100"):
        Ledger.of_deployment(tmp_path).reserve(1)
    from dpaudit.cli import main

    assert main(["pmixed", "budget", str(tmp_path)]) == 2


@pytest.mark.parametrize("text, needle", [
    ('{"queries": 5, "spent": 5, "spent": 0}', "the key 'spent' twice"),  # a last-wins reader: the budget reset
    ('[]', "must be integers"), ('{"queries": true, "spent": 0}', "must be integers"),
    ('{"queries": 5, "spent": false}', "must be integers")])
def test_a_ledger_that_says_two_things_or_holds_flags_answers_nothing(tmp_path, text, needle):
    led = Ledger.create(tmp_path, 5)
    (tmp_path / "ledger.json").write_text(text)
    with pytest.raises(DpauditError, match=needle):
        led.reserve(1)


def test_ledger_holds_across_processes(tmp_path):
    Ledger.create(tmp_path, 50)
    with get_context("spawn").Pool(4) as pool:
        answered = sum(pool.starmap(ledger_spend.spend, [(tmp_path, 30)] * 4))
    assert answered == 50 and Ledger(tmp_path).state()["spent"] == 50


def test_decoding_that_voids_the_guarantee_is_refused():
    check_decoding()
    for kw, what in (({"temperature": 0.7}, "temperature"), ({"top_k": 50}, "top-k"), ({"top_p": 0.9}, "top-p"),
                     ({"greedy": True}, "greedy")):
        with pytest.raises(DpauditError, match=what):
            check_decoding(**kw)


def test_spec_and_partition_rule():
    s = PMixedSpec(n_models=4, sample_rate=0.3, queries=64)
    assert len(s.betas) == 4 and s.betas[0] > s.betas[1]
    with pytest.raises(DpauditError, match="alpha"):
        PMixedSpec(n_models=4, alpha=2.5)
    with pytest.raises(DpauditError, match="no RDP budget"):
        PMixedSpec(n_models=4, epsilon=0.01, delta=1e-10)
    # data-independent: a user's partition depends on its id only
    assert partition_of("alice", 8) == partition_of("alice", 8)
    counts = np.bincount([partition_of(f"u{i}", 8) for i in range(4000)], minlength=8)
    assert counts.min() > 400


def test_subset_sampling_is_poisson_without_duplicates(tmp_path):
    from dpaudit.pmixed.deployment import Deployment

    dep = Deployment(tmp_path, PMixedSpec(n_models=10, sample_rate=0.3), None, None, [], torch.device("cpu"))
    g = dep.generator(0)
    sizes = []
    for _ in range(3000):
        s = dep.sample_subset(g)
        assert len(s) == len(set(s)) and all(0 <= i < 10 for i in s)
        sizes.append(len(s))
    assert np.mean(sizes) == pytest.approx(3.0, abs=0.15)
    assert np.var(sizes) == pytest.approx(10 * 0.3 * 0.7, rel=0.1)  # binomial, not with replacement


TINY_PMIXED = """
[task]
name = "userlm"
source = "chitchat"
n_train = 40
n_test = 2
[model]
name = "tiny-gpt2"
vocab_size = 512
n_embd = 64
n_layer = 2
n_head = 2
max_len = 32
[canaries]
m = 20
repetitions = 4
length = 4
[train]
epochs = 1
batch_size = 16
lr = 1e-2
delta = 1e-5
trainable = "lora"
[evaluate]
whitebox_queries = 6
[[variants]]
name = "pm"
method = "pmixed"
target_epsilon = 8.0
[variants.pmixed]
models = 3
queries = 100
sample_rate = 0.4
"""


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    from dpaudit.run import pipeline

    root = tmp_path_factory.mktemp("pmixed")
    (root / "c.toml").write_text(TINY_PMIXED)
    reports = pipeline.run(root / "c.toml", root / "out", "test")
    return root / "out" / "pm" / "checkpoint", reports["pm"]


def test_deployment_report_and_its_numbers(deployment):
    path, r = deployment
    assert r["claim"]["unit"] == "partition" and r["claim"]["accountant"] == "pmixed_paper"
    ex = r["pmixed"]["exact"]
    assert ex["queries_checked"] == 6 and ex["epsilon_lower"] is not None
    assert r["accounting"]["status"] in ("unverifiable", "under-claim")
    assert r["pmixed"]["betas"] == pytest.approx([P.beta_star(3, 0.4, n, P.rdp_budget(8, 1e-5, 3) / 100)
                                                 for n in (1, 2, 3)])
    pp = r["metrics"]["pmixed_perplexity"]
    # p0 through the protocol's evaluator scores the same tokens as the task metric of the public model
    from dpaudit.tasks import models, registry, userlm

    data = registry.load_data(json.loads((path / "run.json").read_text())["task"])
    base, tok = models.load_dir(path / "base_model")
    assert pp["public"] == pytest.approx(userlm.metrics(base, tok, data.test, max_len=32)["perplexity"], rel=1e-5)
    assert pp["tokens"] > 0 and 0 <= pp["empty_subset_fraction"] <= 1
    assert (path.parent / "report" / "REPORT.md").read_text().count("Exact check") == 1
    from importlib import resources

    import jsonschema

    schema = json.loads(resources.files("dpaudit").joinpath("schemas/report.schema.json").read_text())
    jsonschema.validate(json.loads((path.parent / "report" / "report.json").read_text()), schema)
    jsonschema.validate(json.loads((path.parents[1] / "report.json").read_text()), schema)  # the comparison


def test_deployment_generates_within_budget_and_refuses_beyond_it(deployment, capsys):
    from dpaudit.pmixed.deployment import Deployment, read_transcript

    path, _ = deployment
    dep = Deployment.load(path)
    before = dep.ledger.state()["spent"]
    text = dep.generate("hello", 4, seed=0)
    assert isinstance(text, str) and dep.ledger.state()["spent"] == before + 4
    log = read_transcript(path)
    assert len(log) >= 1 and all(len(e["subset"]) == len(set(e["subset"])) for e in log)
    assert all(e["beta"] == (dep.spec.betas[len(e["subset"]) - 1] if e["subset"] else 0.0) for e in log)
    with pytest.raises(DpauditError, match="temperature"):
        dep.generate("hello", 1, temperature=0.5)
    # another process spends the rest; query T + 1 is then refused there and here, with one line, exit 2
    left = dep.ledger.remaining
    cmd = [sys.executable, "-m", "dpaudit.cli", "pmixed", "generate", str(path), "--prompt", "hi",
           "--max-new-tokens"]
    ok = subprocess.run(cmd + [str(left)], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    from dpaudit.cli import main

    capsys.readouterr()
    assert main(cmd[3:] + ["1"]) == 2  # asked here, after the other process spent the rest
    no = capsys.readouterr()
    assert no.err.strip().splitlines()[-1].startswith("error: query budget exhausted")
    assert not no.out  # nothing answered
    with pytest.raises(BudgetExhausted):
        dep.generate("hello", 1)
    assert main(["pmixed", "generate", str(path), "--prompt", "hi", "--max-new-tokens", "1", "--top-k", "5"]) == 2
    # the evaluation also checks the queries users asked, exactly, from the transcript
    from dpaudit.evaluation.options import EvalOptions
    from dpaudit.pmixed import evaluate_deployment

    r = evaluate_deployment(path, EvalOptions(whitebox_queries=3))
    assert r["pmixed"]["exact"]["transcript_queries_checked"] == 3
    assert r["pmixed"]["exact"]["queries_checked"] == 6


def test_exact_check_refutes_a_deployment_configured_by_the_papers_own_analysis():
    """The two-token pattern as a whole deployment without subsampling (q = 1, allowed by the paper): the real
    per-query RDP is ~955x the claim, and asking that query T times proves epsilon > 8 at delta = 1e-5."""
    import importlib.util
    from pathlib import Path

    from dpaudit.claim import status as claim_check

    path = Path(__file__).resolve().parents[2] / "scripts" / "pmixed_counterexample.py"
    spec = importlib.util.spec_from_file_location("pmixed_counterexample", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    r = mod.row(2, 1.0)
    assert r["exact"] > 500 * r["claimed"]
    assert r["eps_lower"] > 8.0
    res = [{"accountant": "pmixed_exact", "epsilon": None, "lower": r["eps_lower"], "delta": 1e-5}]
    assert claim_check.status(8.0, 1e-5, "add_remove", res, [])["status"] == "under-claim"
    # with the paper's subsampling the same pattern stays inside the claim: the check does not invent a leak
    r = mod.row(80, 0.03)
    assert r["exact"] < r["claimed"] and r["eps_lower"] < 8.0


def test_cli_evaluates_a_deployment_and_shows_its_budget(deployment, tmp_path):
    path, _ = deployment
    from dpaudit.cli import main

    base = [sys.executable, "-m", "dpaudit.cli"]  # the budget commands below run as a user's own process would
    assert main(["evaluate", str(path), "--out", str(tmp_path / "r"), "--whitebox-queries", "2", "--quiet"]) == 0
    r = json.loads((tmp_path / "r" / "report.json").read_text())
    assert r["pmixed"]["exact"]["queries_checked"] >= 2 and "## Exact check" in (tmp_path / "r" / "REPORT.md").read_text()
    b = subprocess.run(base + ["pmixed", "budget", str(path), "--json"], capture_output=True, text=True)
    s = json.loads(b.stdout)
    assert b.returncode == 0 and s["queries"] == 100 and s["left"] == s["queries"] - s["spent"]
    bad = subprocess.run(base + ["pmixed", "budget", str(tmp_path)], capture_output=True, text=True)
    assert bad.returncode == 2 and "not a PMixED deployment" in bad.stderr


# --- the worst-case query search (dpaudit.pmixed.search) ---

def test_batched_divergences_equal_one_query_at_a_time():
    from dpaudit.pmixed import search

    rows = [_random_dists(3, 25, s) for s in range(4)]
    lp0 = torch.stack([r[0] for r in rows])
    lps = torch.stack([r[1] for r in rows])
    betas, a, q = [0.05, 0.02, 0.03], 3, 0.3
    batched = search.screen(lp0, lps, betas, a, q)
    for k, (p0, ps) in enumerate(rows):
        assert torch.allclose(batched[k], audit.query_divergences(p0, ps, betas, a, q), rtol=1e-12, atol=1e-15)


def test_coarsened_laws_stay_normalised_and_keep_everything_at_full_width():
    from dpaudit.pmixed import search

    lp0, lps = _random_dists(3, 40, 5)
    c0, cs = search.coarsen(lp0[None], lps[None], k=8)
    assert c0.shape == (1, 9) and cs.shape == (1, 3, 9)
    assert torch.allclose(torch.logsumexp(c0, -1), torch.zeros(1, dtype=torch.float64), atol=1e-12)
    assert torch.allclose(torch.logsumexp(cs, -1), torch.zeros(1, 3, dtype=torch.float64), atol=1e-12)
    # K = V: the same laws up to the order of the tokens (the rest bucket empty), so the same divergences
    f0, fs = search.coarsen(lp0[None], lps[None], k=40)
    assert torch.isneginf(f0[0, -1])
    d_full = audit.query_divergences(lp0, lps, [0.05, 0.02, 0.03], 3, 0.3)
    assert torch.allclose(search.screen(f0, fs, [0.05, 0.02, 0.03], 3, 0.3)[0], d_full, rtol=1e-9)


def test_subset_divergences_equal_the_conditional_quantity_for_every_subset():
    from dpaudit.pmixed import search

    lp0, lps = _random_dists(3, 30, 7)
    spec = PMixedSpec(n_models=3, epsilon=8.0, queries=100, sample_rate=0.4)
    betas, a = spec.betas, spec.alpha
    got = search.subset_divergences(lp0, lps, spec)
    want_re, want_co = 0.0, 0.0
    for size in (1, 2, 3):
        for S in itertools.combinations(range(3), size):
            for m in range(size):
                bw = betas[size - 2] if size > 1 else 0.0
                want_re = max(want_re, audit.conditional(lps[list(S)], lp0, betas[size - 1], a, m, bw))
                want_co = max(want_co, audit.conditional(lps[list(S)], lp0, betas[size - 1], a, m))
    assert got["subsets"] == 7
    assert got["worst_recomputed"]["divergence"] == pytest.approx(want_re, rel=1e-9)
    assert got["worst_coupled"]["divergence"] == pytest.approx(want_co, rel=1e-9)
    # the brief's two-token pattern, N = 2 at beta = 0.126 for |S| = 2: the search over subsets finds the
    # proof's quantity 5.93 against the base loss 1.19 (test_two_token_counterexample_breaks_the_per_query_claim)
    two = PMixedSpec(n_models=2, epsilon=8.0, queries=100, sample_rate=0.4)
    pair = torch.stack([L([0.5, 0.5]), L([1e-12, 1 - 1e-12])])
    got = search.subset_divergences(L([1e-9, 1 - 1e-9]), pair, two, betas=(0.126 / 3, 0.126))
    assert got["worst_coupled"]["subset"] == [0, 1] and got["worst_coupled"]["removed"] == 0
    assert got["worst_coupled"]["divergence"] == pytest.approx(5.93, abs=0.01)
    assert got["largest_ratio_to_claim"] > 4.9


def test_search_finds_at_least_the_evaluations_worst_and_every_value_is_exact(deployment, tmp_path):
    from dpaudit.cli import main
    from dpaudit.pmixed import search
    from dpaudit.pmixed.deployment import Deployment

    path, r = deployment
    out = tmp_path / "s"
    assert main(["pmixed", "search", str(path), "--out", str(out), "--per-partition", "2", "--held-out", "1",
                 "--exact-top", "100000", "--starts", "1", "--rounds", "2", "--candidates", "6", "--baseline", "6"]) == 0
    s = json.loads((out / "search.json").read_text())
    # every canary position was checked exactly, the evaluation's canary queries among them
    assert s["pool"]["exact_checked"] == s["pool"]["positions"]
    # the baseline is the evaluation's own list of queries: the same worst value (the evaluation runs the model on
    # the whole canary, the search on the context alone: float32 forward passes of different lengths, ~1e-8 apart)
    assert s["baseline"]["queries"] == 6
    assert s["baseline"]["best"]["max_per_query"] == pytest.approx(r["pmixed"]["exact"]["max_per_query"], rel=1e-6)
    assert s["worst"]["max_per_query"] >= s["baseline"]["best"]["max_per_query"]
    dep = Deployment.load(path)
    again = search.exact(dep, s["worst"]["context_ids"])
    assert max(again) == pytest.approx(s["worst"]["max_per_query"], rel=1e-9)
    assert s["worst"]["ratio_to_claim"] == pytest.approx(s["worst"]["max_per_query"] / r["pmixed"]["per_query_rdp"])
    for t in s["local_search"]["trails"]:
        assert t["trail"] == sorted(t["trail"])  # a local search never goes down
    assert s["other_reading"]["reading"] == "theorem"
    assert s["other_reading"]["betas"] == pytest.approx(list(PMixedSpec(n_models=3, epsilon=8.0, queries=100,
                                                                        sample_rate=0.4, reading="theorem").betas))
    assert s["worst"]["epsilon_lower_T_repeats"] >= 0
    md = (out / "SEARCH.md").read_text()
    assert f"{s['worst']['max_per_query']:.6g}" in md and "not a certificate" in md
    # the deployment is read, never spent, and the output refuses the deployment's own folder
    assert dep.ledger.state() == Deployment.load(path).ledger.state()
    assert main(["pmixed", "search", str(path), "--out", str(path / "x")]) == 2
    # a search is redone in its own folder; a user's own SEARCH.md beside no search.json of dpaudit's is never
    # replaced (before 2026-12-06 the folder check looked for an evaluation's files, not the search's)
    args = ["--per-partition", "1", "--held-out", "1", "--starts", "1", "--rounds", "1", "--candidates", "2",
            "--baseline", "1"]
    assert main(["pmixed", "search", str(path), "--out", str(out), *args]) == 0
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "SEARCH.md").write_text("# my notes\n")
    assert main(["pmixed", "search", str(path), "--out", str(mine), *args]) == 2
    assert (mine / "SEARCH.md").read_text() == "# my notes\n" and not (mine / "search.json").exists()


@pytest.mark.parametrize("name", ["../elsewhere", "/tmp", "link"])
def test_an_adapter_outside_the_deployment_is_never_loaded(deployment, tmp_path, name):
    """pmixed.json names its adapters as folders inside the deployment: an absolute path, a ../ or a symlink out
    is refused in one line before any weight is read."""
    import json
    import shutil

    from dpaudit.errors import DpauditError
    from dpaudit.pmixed.deployment import Deployment

    copy = tmp_path / "dep"
    shutil.copytree(deployment[0], copy, symlinks=True)
    spec = json.loads((copy / "pmixed.json").read_text())
    outside = tmp_path / "elsewhere"
    shutil.copytree(copy / spec["adapters"][0], outside)
    if name == "link":
        (copy / "link").symlink_to(outside)
    spec["adapters"][0] = name if name != "/tmp" else str(outside)
    (copy / "pmixed.json").write_text(json.dumps(spec))
    with pytest.raises(DpauditError, match="outside") as e:
        Deployment.load(copy)
    assert "\n" not in str(e.value)


def test_an_edited_manifest_is_never_reported_as_planned(deployment, tmp_path, capsys):
    """The deployment's card binds its canaries.json (manifest_digest), as a checkpoint's does: an evaluation plan
    edited after training is refused, or evaluated as exploratory with --off-plan (issue wave 5 · 0/5)."""
    import shutil

    from dpaudit.cli import main

    path, _ = deployment
    card = json.loads((path / "privacy_card.json").read_text())
    assert card["extra"]["manifest_digest"]
    edited = tmp_path / "dep"
    shutil.copytree(path, edited)
    man = json.loads((edited / "canaries.json").read_text())
    man["audit_plan"]["evaluation"]["confidence"] = 0.5  # a weaker test, chosen after the fact
    (edited / "canaries.json").write_text(json.dumps(man))
    assert main(["evaluate", str(edited), "--out", str(tmp_path / "r"), "--whitebox-queries", "2", "--quiet"]) == 2
    assert "not the manifest this model was trained with" in capsys.readouterr().err
    assert main(["evaluate", str(edited), "--out", str(tmp_path / "r"), "--whitebox-queries", "2", "--quiet",
                 "--off-plan"]) == 0
    assert json.loads((tmp_path / "r" / "report.json").read_text())["audit_plan"]["status"] == "off-plan"
    for c in man["canaries"]:  # every canary "inserted": a one-sided audit, refused even as exploratory
        c["inserted"], c["sign"], c["repetitions"] = True, 1, max(1, c["repetitions"])
    (edited / "canaries.json").write_text(json.dumps(man))
    assert main(["evaluate", str(edited), "--out", str(tmp_path / "r2"), "--whitebox-queries", "2", "--quiet",
                 "--off-plan"]) == 2
    assert "every canary is inserted" in capsys.readouterr().err and not (tmp_path / "r2").exists()


def test_a_deployment_goes_through_the_five_steps_every_evaluation_takes(deployment):
    """PMixED's evaluation is load, score, audit, judge, render (issue wave 5 · 0/5 item 3): frozen values, the
    shared Evidence and Verdict types, the one verdict rule (a failed mechanism check in the evidence makes the
    headline mechanism-mismatch here as for any checkpoint), and the one report builder."""
    import dataclasses

    from dpaudit.claim.verdict import Verdict
    from dpaudit.evaluation.evidence import Evidence
    from dpaudit.evaluation.options import EvalOptions
    from dpaudit.pmixed import evaluate_deployment, steps

    path, r = deployment
    options = EvalOptions(whitebox_queries=6)  # the run's own evaluation (its [evaluate] section)
    loaded = dataclasses.replace(steps.load(path, options), data=None)  # the perplexity is test_..._its_numbers'
    scored = steps.score(loaded)
    audited = steps.audit(loaded, scored)
    verdict = steps.judge(loaded, audited)
    for value in (loaded, scored, audited):
        with pytest.raises(dataclasses.FrozenInstanceError):
            value.seed = 1
    assert isinstance(audited.evidence, Evidence) and isinstance(verdict, Verdict)
    assert audited.evidence.plan.group_size == 2 and audited.evidence.n_families == 2
    report = steps.render(loaded, scored, audited, verdict, None, 0.0)
    for key in ("claim", "empirical", "empirical_best", "family_wise", "attacks", "canary_plan", "audit_plan",
                "threshold_rule"):  # what `dpaudit run` reported through the same steps (the accounting and the
        assert report[key] == r[key], key  # exact check also read the transcript, which other tests here grow)
    assert report["verdict"]["status"] == verdict.status and report["metrics"] == {}
    assert evaluate_deployment.__module__ == "dpaudit.pmixed.steps"
    failed = [MechanismEvidence("extraction", None, None, None, 1, True, 0.0,
                                (CheckRow("noise", "fail", "half the noise", 0.0),))]
    broken = dataclasses.replace(audited, evidence=dataclasses.replace(audited.evidence, mechanism_checks=failed))
    assert steps.judge(loaded, broken).status == "mechanism-mismatch"


def test_perplexity_solved_in_batches_is_the_per_text_answer(deployment, monkeypatch):
    """The lambdas of many texts' rows solved at once give, bit for bit, what solving each text alone gives (each
    row is solved independently; the sums run in the same order)."""
    from dpaudit.pmixed import evaluate as work
    from dpaudit.pmixed.deployment import Deployment
    from dpaudit.tasks import registry

    path, _ = deployment
    dep = Deployment.load(path)
    texts = [r["text"] for r in registry.load_data(json.loads((path / "run.json").read_text())["task"]).test][:60]
    batched = work.perplexity(dep, texts, 3)
    monkeypatch.setattr(work, "ROW_ELEMENTS", 1)  # a flush after every text: the per-text solve
    assert work.perplexity(dep, texts, 3) == batched and batched["tokens"] > 0
