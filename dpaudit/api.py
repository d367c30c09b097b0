"""Python API for a model trained anywhere (the CLI's ``canaries new``, ``card`` and ``evaluate`` as functions).

    from dpaudit.api import new_canaries, insert_canaries, card_from_opacus, evaluate, write_report

    manifest = new_canaries(m=200, repetitions=1)            # before training: the audit plan is fixed now
    manifest.save("out/canaries.json")
    train_ds = insert_canaries(train_ds, manifest, column="text")
    model, optimizer, loader = engine.make_private(...)      # Opacus
    probe = attach_probe(optimizer, sample_rate=loader.sample_rate)  # white-box canaries and run-time checks
    ... train as usual ...
    probe.save("out/model")                                  # beside the saved model
    card = card_from_opacus(engine, loader, optimizer, delta=1e-5)
    report = evaluate(model, tokenizer, card, manifest)     # the report.json dict
    write_report(report, "out/report")                      # REPORT.md, report.json, plots
    print(report["verdict"]["status"], report["verdict"]["reason"])
"""

from __future__ import annotations

from pathlib import Path

from dpaudit.attacks import register_attack
from dpaudit.audit.check_registry import register as register_mechanism_check
from dpaudit.canaries.designs import register as register_canary_design
from dpaudit.canaries.making import new as new_canaries
from dpaudit.canaries.manifest import Manifest, load_manifest
from dpaudit.canaries.new_tokens import add as add_canary_tokens
from dpaudit.canaries.planting import insert_canaries, write_records
from dpaudit.claim.card import PrivacyCard, load_card
from dpaudit.errors import DpauditError
from dpaudit.evaluation.options import EvalOptions
from dpaudit.probe.settings import ProbeSettings

__all__ = ["EvalOptions", "ProbeSettings", "add_canary_tokens", "attach_probe", "canary_labels", "card_from_opacus", "evaluate", "functional_probe",
           "insert_canaries", "load_manifest", "new_canaries", "register_accountant", "register_attack",
           "register_canary_design", "register_mechanism_check",
           "sample_canaries_at_rate", "write_records",
           "write_report"]


def canary_labels(input_ids, tokenizer, manifest: Manifest) -> list[int]:
    """The training labels of one canary record under the final-weights design (``train_on = "secret"``):
    ``input_ids`` copied where a position holds one of the manifest's new tokens, -100 (ignored) everywhere else,
    in the Hugging Face convention (labels aligned with the inputs; the model shifts them). Pass them as the
    record's ``labels`` so that its loss reads its secret token only.

    Args:
        input_ids: the canary record's token ids, as your loop feeds it (special tokens included).
        tokenizer: the tokenizer extended by :func:`add_canary_tokens`.
        manifest: the canaries' manifest.

    Returns:
        One label per input id.

    Raises:
        DpauditError: the tokenizer lacks the new tokens, or the record holds none of them.
    """
    from dpaudit import checks
    from dpaudit.canaries import new_tokens
    from dpaudit.canaries.manifest import as_manifest

    manifest = as_manifest(manifest, "canary_labels")
    checks.hf_tokenizer(tokenizer, "canary_labels")
    try:
        ids = [int(i) for i in input_ids]
    except (TypeError, ValueError):
        raise DpauditError(f"canary_labels needs one canary record's token ids (a list of integers), got "
                           f"{type(input_ids).__name__}") from None
    return new_tokens.secret_only(ids, ids, new_tokens.token_ids(tokenizer, manifest))


def sample_canaries_at_rate(dp_loader, is_canary, manifest: Manifest):
    """The loader Opacus' ``make_private`` returned, with the canary rows sampled at the manifest's own rate
    (``sample_rate``, fixed before training: docs/canary_designs.md, "Canaries at their own rate") and every other
    row at the loader's rate, each row independently at every step. Train on the loader this returns and pass it
    to :func:`card_from_opacus`, which then accounts every record at the larger rate (Opacus' own accountant sees
    the data's rate only): calibrate the noise multiplier at that rate (``dpaudit account --target-epsilon E
    --sample-rate Q --steps T``).

    Args:
        dp_loader: the Poisson loader ``make_private`` returned (``poisson_sampling=True``, one process).
        is_canary: one flag per row of the loader's dataset, in its order: True for an inserted canary record.
        manifest: the canaries' manifest; its plan's ``sample_rate`` is the canaries' rate.

    Returns:
        A ``DataLoader`` over the same dataset and collation, whose batch sampler draws each row at its own rate.

    Raises:
        DpauditError: the manifest fixes no rate, the loader is not Opacus' Poisson loader, or ``is_canary`` does
        not hold one flag per row.
    """
    from dpaudit.canaries import sampling
    from dpaudit.canaries.manifest import as_manifest

    manifest = as_manifest(manifest, "sample_canaries_at_rate")
    rate = manifest.plan.sample_rate
    if rate is None:
        raise DpauditError("this manifest fixes no sampling rate of the canaries' own: make it with "
                           "new_canaries(..., sample_rate=Q) (dpaudit canaries new --sample-rate Q) before training")
    return sampling.at_their_rate(dp_loader, is_canary, rate)


def attach_probe(optimizer, settings: ProbeSettings | None = None, *, model=None, **options):
    """Attach dpaudit's white-box probe to an Opacus DP optimizer (hooks or ghost clipping, distributed), after
    ``make_private`` and before the first step. After training, ``probe.save(model_dir)``; ``dpaudit evaluate`` then
    audits the recorded updates and checks the noise, sampling, clipping, steps and divisor that ran against the
    card (docs/probe.md); ``probe.status()`` reads the online checks at any step (anytime-valid).

    Args:
        optimizer: The DP optimizer ``make_private`` returned.
        settings: The probe's settings (:class:`ProbeSettings`): ``sample_rate`` (the card's q: ``loader.sample_rate``
            of the loader make_private returned), ``m`` canaries, ``seed``, ``kind``, ``coordinates`` (``"block"``,
            a dedicated parameter block, or ``"model"``), ``clip_canaries``, ``record_steps`` (False: O(m) state
            for m of 10^5 and more), ``on_fail`` (``"warn"``, ``"raise"``, None), ``dataset_size`` (N, tested while
            training runs) and ``sampler`` (``"poisson"`` or ``"shuffle"``, as the card states).
        model: The model the optimizer trains, so the probe also checks that nothing outside the DP optimizer
            moves (coverage).
        **options: The same settings as keywords (``attach_probe(opt, sample_rate=q, m=1000)``), over ``settings``.

    Returns:
        The probe (:class:`dpaudit.probe.Probe`).

    Raises:
        DpauditError: A setting out of range or an optimizer the probe cannot watch, in one line.
    """
    from dpaudit.probe import attach

    return attach(optimizer, ProbeSettings.of(settings, options), model=model)


def functional_probe(shapes, settings: ProbeSettings | None = None, *, clipping_norm: float, noise_multiplier: float,
                     expected_batch_size: float, names: list[str] | None = None, **options):
    """dpaudit's white-box probe for DP code that is not an Opacus optimizer (a hand-written DP-SGD step, a
    ``torch.func`` loop, a JAX/optax loop through NumPy arrays). Per noisy step
    ``clipped_sum = probe.add_canaries(clipped_sum, records=b)`` before the noise and ``probe.observe(update)``
    after it (update = (clipped sum + noise) / B); ``probe.save(model_dir)`` after training (docs/probe.md "Any
    loop").

    Args:
        shapes: The tensors the step updates: a list or dict of shapes, tensors or arrays.
        settings: The probe's settings (:class:`ProbeSettings`; ``sample_rate``, the card's q, is required);
            ``coordinates``, ``clip_canaries`` and ``record_steps`` do not apply (the canaries are on the step's
            own tensors).
        clipping_norm: The C the step clips to.
        noise_multiplier: The σ of the noise the step adds (noise std / C).
        expected_batch_size: The divisor B the step uses.
        names: A name per tensor, for findings (default: the dict's keys, or index and shape).
        **options: The settings as keywords (``sample_rate=q, m=1000``), over ``settings``.

    Returns:
        The probe (:class:`dpaudit.probe.functional.FunctionalProbe`).

    Raises:
        DpauditError: A setting out of range, in one line.
    """
    from dpaudit.probe.functional import FunctionalProbe

    return FunctionalProbe(shapes, settings, clipping_norm=clipping_norm, noise_multiplier=noise_multiplier,
                           expected_batch_size=expected_batch_size, names=names, **options)


def card_from_opacus(privacy_engine, data_loader, optimizer=None, **kwargs) -> PrivacyCard:
    """The privacy card of a run trained with Opacus, from its own engine (imported lazily: it needs Opacus).

    Args:
        privacy_engine: The ``PrivacyEngine`` that trained the model (its accountant's history is the mechanism).
        data_loader: The loader ``make_private`` returned (its sample rate and dataset size go on the card).
        optimizer: The DP optimizer, to name the probe runs attached to it (``extra.probe_runs``).
        **kwargs: ``delta`` (required), ``intended_epsilon`` and the rest of
            :func:`dpaudit.claim.opacus_card.card_from_opacus`.

    Returns:
        The :class:`PrivacyCard`; ``card.save(model_dir / "privacy_card.json")``.

    Raises:
        DpauditError: A run the card cannot describe (one line naming why).
    """
    from dpaudit.claim.opacus_card import card_from_opacus as build

    return build(privacy_engine, data_loader, optimizer, **kwargs)


def evaluate(model, tokenizer, card: PrivacyCard | str | Path, manifest: Manifest | str | Path,
             options: EvalOptions | None = None, *, max_len: int = 64, probe=None, **settings) -> dict:
    """Audit a model held as objects; writes nothing.

    Args:
        model: The trained model (a Hugging Face causal LM or classifier).
        tokenizer: Its tokenizer.
        card: The :class:`PrivacyCard`, or the path of its privacy_card.json.
        manifest: The canaries' :class:`Manifest`, or the path of its canaries.json.
        options: :class:`dpaudit.evaluation.options.EvalOptions`: ``attacks``, ``rule``, ``confidence`` and
            ``n_references`` default to the manifest's evaluation plan (departing from it needs ``off_plan=True``);
            ``reference`` (a model object or a folder) calibrates the reference attack, skipped with a note without
            one; ``framing`` (``tokenizer`` by default here: ``tokenizer(text)``, as a Hugging Face loop saw its
            records; ``bos_eos``: BOS + text + EOS); ``device`` None leaves the model where it is.
        max_len: Tokens per scored sequence.
        probe: The folder a probe saved its records into (or the saved probe): its white-box audit and mechanism
            checks join the report.
        **settings: The fields of ``options`` as keywords (``batch_size=32``), instead of ``options``.

    Returns:
        The report dict (the report.json contract: :func:`write_report` writes it).

    Raises:
        DpauditError: Bad input, in one line naming the problem and the fix.
    """
    from dpaudit.checkpoint import Checkpoint
    from dpaudit.evaluation.steps import evaluate_checkpoint

    if options is not None and settings:
        raise DpauditError("pass either options or keyword settings to evaluate, not both")
    if options is None:
        from dataclasses import fields

        known = {f.name for f in fields(EvalOptions)}
        unknown = sorted(set(settings) - known)
        if unknown:
            raise DpauditError(f"evaluate has no setting {unknown[0]!r}; the settings are {', '.join(sorted(known))}")
        options = EvalOptions(**{"framing": "tokenizer", "device": None, **settings})
    _check_objects(model, tokenizer, max_len)

    if isinstance(card, (str, Path)):
        card = load_card(Path(card))
    if isinstance(manifest, (str, Path)):
        manifest = load_manifest(Path(manifest))
    if not isinstance(card, PrivacyCard) or not isinstance(manifest, Manifest):
        raise DpauditError("evaluate needs a PrivacyCard and a Manifest (or paths to privacy_card.json and "
                           "canaries.json)")
    if probe is not None and not isinstance(probe, (str, Path)):
        if not hasattr(probe, "saved_to"):
            raise DpauditError(f"probe must be the folder probe.save() wrote into, or the probe itself; got "
                               f"{type(probe).__name__}")
        probe = probe.saved_to
        if probe is None:
            raise DpauditError("the probe has not been saved; call probe.save(folder) after training, then evaluate")
    if probe is not None and not Path(probe).is_dir():
        raise DpauditError(f"probe folder {probe} does not exist; pass the folder probe.save() wrote into")
    from dpaudit.module_state import as_given

    with as_given(model, options.reference):
        ck = Checkpoint(path=None, card=card, manifest=manifest, run={}, objects=(model.eval(), tokenizer),
                        max_len=max_len, whitebox_dir=None if probe is None else Path(probe))
        return evaluate_checkpoint(ck, options)


def _check_objects(model, tokenizer, max_len) -> None:
    """The objects :func:`evaluate` audits, checked at the boundary: a Hugging Face model, a tokenizer, a length."""
    from dpaudit import checks

    if isinstance(model, (str, Path)):
        raise DpauditError(f"evaluate audits a model held as an object; for the folder {model} run "
                           "`dpaudit evaluate FOLDER` (or load it with from_pretrained first)")
    checks.hf_model(model, "evaluate")
    checks.hf_tokenizer(tokenizer, "evaluate")
    if isinstance(max_len, bool) or not isinstance(max_len, int) or not 2 <= max_len <= 1_000_000:
        raise DpauditError(f"max_len must be an integer of at least 2 (tokens per scored sequence), got {max_len!r}")


def register_accountant(name: str, accountant):
    """Add an accountant of your own beside the shipped four (docs/architecture.md, "Extension points").

    Args:
        name: Its name (a card may name it as ``claim.accountant``).
        accountant: An object or module with ``interval(events, delta, relation, dataset_size) -> (lower | None,
            upper, detail)`` that raises :class:`dpaudit.accounting.NotApplicable` for what it does not analyse.
            Its upper value must be sound: the smallest upper value of all accountants certifies a claim.

    Returns:
        The function that removes it again.

    Raises:
        DpauditError: A name that is taken, or an object without ``interval``.
    """
    from dpaudit import accounting

    return accounting.register_accountant(name, accountant)


def write_report(report: dict, out: str | Path, redact: bool = False) -> Path:
    """Write REPORT.md, report.json and the plots of ``report`` into folder ``out``.

    Args:
        report: The dict :func:`evaluate` returned.
        out: The folder (created; refused when it holds a REPORT.md, report.json or plot but no report of
            dpaudit's).
        redact: Leave secrets and paths out of the written files.

    Returns:
        The path of REPORT.md.
    """
    from dpaudit.report import write as rep

    if not isinstance(report, dict) or report.get("kind") not in ("evaluation", "comparison"):
        raise DpauditError(f"write_report needs the report dict dpaudit.api.evaluate returned, got "
                           f"{type(report).__name__}" + (f" of kind {report.get('kind')!r}" if isinstance(report, dict)
                                                          else ""))
    from dpaudit.io import REPORT_FILES, check_out

    out = check_out(out, outputs=REPORT_FILES, what="write_report's out")  # a user's own REPORT.md is never replaced
    rep.write(report, out, redact=redact)
    return out / "REPORT.md"
