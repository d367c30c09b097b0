"""Every list of allowed values, defined once and imported wherever it is checked, offered or documented.

Pure Python (no torch): ``dpaudit check`` and config parsing import it without loading models. Where a
registry holds the implementations (attacks, accountants, tasks), the registry is checked against the
names here at import, so the two cannot drift.
"""

from __future__ import annotations

# ---- runs -------------------------------------------------------------------------------------------
TASKS = ("sentiment", "table2text", "userlm")
# each task's named fields -> the column names looked for (its own name first); [task.columns] overrides
TASK_COLUMNS = {"sentiment": {"text": ("text", "sentence"), "label": ("label",)},
                "table2text": {"table": ("table", "mr", "meaning_representation"),
                               "reference": ("reference", "ref", "human_reference")},
                "userlm": {"user": ("user", "user_id", "sender", "author"), "text": ("text",)}}
DEFAULT_SOURCE = {"sentiment": "rotten-tomatoes", "table2text": "e2e-synthetic", "userlm": "chitchat"}  # per task
OBJECTIVES = ("lm", "label_words", "classifier")
RECORD_METHODS = ("dp_adam", "dp_frost", "lmo_dp")
# private prediction (dpaudit/pmixed): trained non-privately on partitions, privacy spent per query
PREDICTION_METHODS = ("pmixed",)
USER_METHODS = ("user_dp_sgd", "group_privacy")  # need task.name = "userlm"
METHODS = RECORD_METHODS + USER_METHODS + PREDICTION_METHODS
TRAINABLES = ("full", "lora", "head")  # head: a classifier's head only (linear probe)
TIED_EMBEDDINGS = ("untie", "freeze")
LORA_TARGETS = ("attention", "all-linear")
# ghost_fsdp: sharded under torchrun (trainers/fsdp.py); bk: book-keeping, one backward (trainers/bk_clipping.py)
GRAD_SAMPLE_MODES = ("hooks", "ghost", "ghost_fsdp", "bk")
OPTIMIZERS = ("adam", "sgd")  # train.optimizer: the base optimizer the DP wrapper steps (trainers/optim.py)
AUTOCAST = ("off", "bf16")  # train.autocast: a non-private run's forward and backward in bf16 (trainers/units.py)
GHOST_MODES = ("ghost", "ghost_fsdp", "bk")  # the clipped sum arrives in p.grad; tied embeddings must be untied
GRADIENT_CANARY_KINDS = ("dirac", "sparse", "dense")
# DP-FROST (trainers/dp_frost.py): how partitions are chosen, its PGM scores, and which reading of the paper's
# selection sampling rate the accounting uses (text: q_ps; alg3: 1, as Alg. 3 passes)
FROST_SELECTIONS = ("psel", "single", "random", "pval")
PGM_VARIANTS = ("dp_mg", "dp_mgn", "dp_mgna")
FROST_RATE_READINGS = ("text", "alg3")
SELECTIONS = ("random", "longest", "shortest", "high_ppl", "low_ppl", "random_chunk")  # user-level record choice
USER_SAMPLING = ("paper", "fixed")  # user-level record draws: Chua et al.'s per step / padded, or fixed once

# ---- privacy cards ----------------------------------------------------------------------------------
UNITS = ("record", "user", "partition")  # partition: one model of an ensemble (PMixED)
NEIGHBOURING = ("add_remove", "replace_one")
SAMPLERS = ("poisson", "shuffle", "with_replacement", "other")  # other: fixed order or unknown
GAUSSIAN_ACCOUNTANTS = ("rdp", "prv", "pld", "dpa_rdp")  # calibrate the Gaussian methods' noise
# the accountant that calibrates sigma when [train] accountant is not given: each method's paper's own (a
# reproduction calibrates as its paper did; the card's claim.accountant records it). Li et al. and DP-FROST
# (Hong et al., §4.6) calibrate with RDP (Opacus), Chua et al. with dp_accounting's PLD; LMO-DP's own noise is
# calibrated by [train.lmo] accounting, its Gaussian controls by RDP as the paper's DP-SGD baseline; PMixED trains
# its ensemble without noise (its privacy is per query, dpaudit/pmixed).
PAPER_ACCOUNTANT = {"dp_adam": "rdp", "dp_frost": "rdp", "lmo_dp": "rdp", "user_dp_sgd": "pld",
                    "group_privacy": "pld", "pmixed": "rdp"}
# every re-accounting backend; lmo_vector analyses LMO-DP's noise on the d-dimensional gradient (upper only)
ACCOUNTANTS = GAUSSIAN_ACCOUNTANTS + ("lmo_vector",)
# what produced a card's claim; lmo_paper: LMO-DP's own (scalar) analysis, never a re-accounting backend
CLAIM_SOURCES = ACCOUNTANTS + ("lmo_paper", "pmixed_paper", "external", "none")
LMO_DRAWS = ("per_step", "per_coordinate")  # one inverse scale Y per step, or one per coordinate
LMO_FORMS = ("sum", "mixture")
LMO_OBJECTIVES = ("mean_abs", "variance")
LMO_ACCOUNTINGS = ("paper", "vector")  # which analysis calibrates LMO-DP's noise and writes its claim

# ---- audits and reports -----------------------------------------------------------------------------
# outputs only (black box: the loss and its calibrations, exposure) run by default; the final-weights scores
# (attacks/final_weights.py) read canaries' own rows and join a plan only where the canaries own rows
# (dpaudit.canaries.plan.default_attacks): every attack of a plan is one test of its Bonferroni family
OUTPUT_ATTACKS = ("loss", "zlib", "min_k", "min_k_plus", "reference", "exposure")
FINAL_WEIGHTS_ATTACKS = ("final_weights", "final_weights_norm")
ATTACKS = OUTPUT_ATTACKS + FINAL_WEIGHTS_ATTACKS
# the three tiers of empirical evidence, named the same on every surface (docs/architecture.md)
TIERS = ("outputs only", "final weights", "in-run")
# attacks registered at run time (dpaudit.attacks.register_attack): name -> tier; never in a default plan
REGISTERED_ATTACKS: dict[str, str] = {}


def attack_names() -> tuple[str, ...]:
    """Every attack an evaluation plan may name: the shipped ones, then those registered (in registration order)."""
    return ATTACKS + tuple(a for a in REGISTERED_ATTACKS if a not in ATTACKS)


def evidence_tier(attack: str) -> str:
    """The tier of one test (a report row's ``attack``): the probe's gradient canaries are in-run evidence, the
    final-weights scores read the checkpoint's own rows, everything else reads the model's outputs only."""
    if attack.startswith("whitebox"):
        return "in-run"
    if attack in FINAL_WEIGHTS_ATTACKS:
        return "final weights"
    return REGISTERED_ATTACKS.get(attack, "outputs only")
RULES = ("bonferroni", "held_out")
# canary designs (dpaudit/canaries/manifest.py, docs/canary_designs.md); a classifier's mislabelled canaries are the
# template design with labels >= 2
CANARY_DESIGNS = ("template", "new-token", "rare-token", "bigram")
SCORE_ON = ("record", "secret")  # what the black-box attacks score: the whole canary, or its secret's tokens
# how a canary is framed for scoring, as the model saw its training records: BOS + text + EOS (dpaudit's
# trainers) or the tokenizer's own special tokens (tokenizer(text): a Hugging Face training loop)
FRAMINGS = ("bos_eos", "tokenizer")
# The words of every verdict, check and status, defined once in docs/verdicts.md (tests/report/test_vocabulary.py
# holds every surface to it: report.json, REPORT.md, the model card, check, compare, table, the policy's keys).
# The two checks of a claim, reported separately (dpaudit.claim.status, dpaudit.claim.verdict):
ACCOUNTING_STATUSES = ("verified", "under-claim", "unverifiable")
# violated: a lower bound exceeds the claim; consistent: the audit could have refuted the claim (its ceiling
# reaches it) and did not; underpowered: not refuted, but only tested up to a ceiling below the claim;
# no-power: no bound was possible at all. The same words as the headline's, with the same meaning.
EMPIRICAL_STATUSES = ("violated", "consistent", "underpowered", "no-power")
PROBE_CHECKS = ("noise", "sampling", "clipping", "steps", "divisor", "coverage")  # dpaudit/audit/mechanism_checks.py
# every check a report can carry: the probe's, "records" (the card names probe runs whose records are missing,
# dpaudit/probe/readback.py) and "weights" (the record's fingerprint of the weights it watched, compared with the
# checkpoint's: dpaudit/probe/fingerprint.py)
MECHANISM_CHECKS = ("records", "weights", *PROBE_CHECKS)
CHECK_STATUSES = ("pass", "fail", "not tested")  # a mechanism check's outcome
NOISE_STATUSES = ("no shortfall", "below the card")  # a white-box noise check (dpaudit/audit/noise_check.py)
PLAN_STATUSES = ("as planned", "off-plan", "unplanned")  # the evaluation against the plan fixed before training
# headline verdicts, from best to worst (dpaudit compare flags a move to a worse one); equal rank = neither is
# worse. None of them means "proven private": consistent = accounting verified and an audit able to refute
# the claim did not; underpowered = accounting verified, audit too weak to reach the claim (the empirical check's
# own words: one word, one meaning at both levels).
# mechanism-mismatch: a probe check failed (or the recorded updates carry less noise than the card): the claim
# rests on a card that does not describe the code that ran.
VERDICT_RANK = {"consistent": 0, "underpowered": 1, "no-claim": 1, "inconclusive": 2, "accounting-mismatch": 3,
                "mechanism-mismatch": 3, "violated": 4}
VERDICTS = tuple(VERDICT_RANK)
# Words older reports and policies used, read as their current names so that older report.json and policy files
# keep their meaning (docs/verdicts.md, "Older words"): the headline "underpowered" was "not-refuted" until
# 2026-11-26; the empirical check's "consistent" was "not-refuted" and the noise check's "no shortfall" was
# "consistent" until 2026-11-28.
LEGACY_WORDS = {"verdict": {"not-refuted": "underpowered"},
                "empirical": {"not-refuted": "consistent"},
                "noise": {"consistent": "no shortfall"}}
LEGACY_VERDICTS = LEGACY_WORDS["verdict"]


def current_word(level: str, word: str) -> str:
    """``word``'s current name at ``level`` (``verdict``, ``empirical`` or ``noise``): an older report's or
    policy's word mapped (:data:`LEGACY_WORDS`), any other word unchanged."""
    return LEGACY_WORDS[level].get(word, word)


def current_words(r: dict) -> None:
    """An older evaluation report's words, in place, as their current names (docs/verdicts.md, "Older words"): its
    headline, its empirical check and its noise checks."""
    v = r["verdict"]
    v["status"] = current_word("verdict", v["status"])
    emp = v.get("empirical")
    if isinstance(emp, dict) and isinstance(emp.get("status"), str):
        emp["status"] = current_word("empirical", emp["status"])
    for n in r.get("noise_checks") or []:
        if isinstance(n, dict) and isinstance(n.get("status"), str):
            n["status"] = current_word("noise", n["status"])


def verdict_name(status: str) -> str:
    """A headline verdict's current name (an older report's or policy's word mapped, :data:`LEGACY_WORDS`)."""
    return current_word("verdict", status)
# the audit report shipped beside the weights (`dpaudit model-card --ship-report`): the output of evaluating the
# checkpoint, so never part of the checkpoint hash it records (dpaudit/checkpoint.py)
SHIPPED_REPORT = "dpaudit_report.json"
TASK_METRICS = ("accuracy", "bleu", "nist", "meteor", "rougeL", "cider")

# Relative slack between accountants' numerical estimates: a re-accounted epsilon above the claim by
# more than this fraction is a mismatch (the evaluator's verdict and the CI gate use the same rule).
ACCOUNTING_TOLERANCE = 0.02


def exceeds(reaccounted: float, claimed: float, tolerance: float = ACCOUNTING_TOLERANCE) -> bool:
    """The one tolerance rule: ``reaccounted`` is larger than ``claimed`` beyond the relative slack."""
    return reaccounted > claimed * (1 + tolerance)
