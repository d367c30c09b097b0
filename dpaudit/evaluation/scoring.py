"""Step 2 of ``dpaudit evaluate`` (load, **score**, audit, judge, render): score every canary of the manifest against the checkpoint's model.

Pure in the sense the pipeline needs: it reads the model and the manifest, returns a :class:`CanaryScores`
(one float per canary and attack, higher = member; exposure's log-perplexities; notes on what was
skipped) and changes nothing it was given. A causal LM is scored by the black-box attacks (one shared
forward pass) and by exposure; a sequence classifier by its label log-probabilities (attacks/classifier.py).

(A little over 300 lines: the black-box, exposure and white-box scorers of one manifest share its plan and the
model's single forward pass.)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from dpaudit import options, progress
from dpaudit.errors import DpauditError, first_line
from dpaudit.probe import readback
from dpaudit.tokens import context_limit, model_device, pad_id


@dataclass(frozen=True)
class ExposureScores:
    canary_bits: np.ndarray  # log-perplexity (bits) of each canary's secret
    reference_bits: np.ndarray  # of each reference secret
    enumerated: bool  # the references are the whole randomness space (minus the canaries)
    suffix_scored: bool = True  # False: log P(secret tokens | prefix) only (the token trie over the whole space)


def enumerate_whole_space(plan, model, enumerate_limit: int | None) -> bool:
    """Whether exposure ranks over the whole space: only when asked (``enumerate_limit`` > 0, opt-in: the trie
    costs a forward pass per node, and its exposure numbers never enter the verdict) and the space has at most
    ``enumerate_limit`` secrets; otherwise among sampled reference secrets."""
    if plan.design != "template":  # the trie enumerates a template's symbol strings only
        return False
    return enumerate_limit is not None and 0 < plan.space_size <= enumerate_limit


@dataclass(frozen=True)
class ScoringSettings:
    """How the score step scores: the attacks, the batch size, the context length the classifier truncates to,
    the reference model of calibration (a path, a model object, or None: the checkpoint's base), the exposure
    references (sampled count, or the whole space up to ``enumerate_limit`` secrets) and the canaries' framing."""

    attacks: tuple[str, ...]
    batch_size: int
    max_len: int
    reference: str | Path | object | None = None
    n_references: int = 0
    enumerate_limit: int = 0
    framing: str = "bos_eos"


@dataclass(frozen=True)
class CanaryScores:
    scores: dict  # attack -> (m,) scores in manifest order
    exposure: ExposureScores | None = None
    notes: tuple = field(default_factory=tuple)


def framing_of(ck, framing: str = "auto") -> str:
    """How the canaries are framed for scoring: as the model saw its training records. ``auto``: BOS + text + EOS
    for a checkpoint of dpaudit's trainers (it has run.json), the tokenizer's own special tokens otherwise."""
    ours = _trained_by_dpaudit(ck)  # dpaudit's trainers: BOS + text + EOS
    if framing == "tokenizer" and ours:  # (the names are checked once, by EvalOptions)
        raise DpauditError("--canary-framing tokenizer contradicts this checkpoint: dpaudit's trainers (its run.json) "
                           "fed every record as BOS + text + EOS, so canaries scored otherwise are not what the model "
                           "saw; drop --canary-framing (auto) or pass bos_eos")
    if framing != "auto":
        return framing
    return "bos_eos" if ours else "tokenizer"


def framing_source(ck, framing: str) -> str:
    """"checkpoint" when the checkpoint decides the framing (auto, or dpaudit's run.json); "option" when the user's
    --canary-framing states it for a loop dpaudit cannot see (the report says so: stated, not verified)."""
    return "option" if framing != "auto" and not _trained_by_dpaudit(ck) else "checkpoint"


def _trained_by_dpaudit(ck) -> bool:
    """The checkpoint has dpaudit's run.json (its trainers feed records as BOS + text + EOS)."""
    return bool(ck.run.get("config") or ck.run.get("model", {}).get("name"))


def score(ck, model, tok, settings: ScoringSettings, shard: tuple[int, int] | None = None) -> CanaryScores:
    """Every canary's scores under ``settings``; ``shard = (i, n)`` computes only shard i's batches (NaN elsewhere,
    :mod:`dpaudit.evaluation.shards`)."""
    from dpaudit.tasks.causal_check import check_causal
    from dpaudit.tasks.models import is_classifier

    texts = [c.text for c in ck.manifest.canaries]
    check_new_tokens(tok, ck.manifest)  # a new-token manifest scored with the base tokenizer scores other tokens
    if is_classifier(model):  # classifiers truncate to max_len, as in training
        return _classifier(ck, model, tok, texts, settings, shard)
    check_context(model, tok, ck.manifest, texts, settings.framing)
    check_causal(model, tok, "the audited model")  # also a model given to the Python API, not read from a folder
    return _causal_lm(ck, model, tok, texts, settings, shard)


def _reference_model(ck, reference: str | Path | None, tok=None):
    """The reference model for calibration: an explicit path, else the checkpoint's base model (or None); checked
    to read the canaries as ``tok`` (the audited model's tokenizer) encodes them
    (dpaudit/evaluation/reference_check.py)."""
    if isinstance(reference, (str, Path)):
        return _base_from_folder(ck, Path(reference), tok)
    if reference is not None:  # a model object (dpaudit.api.evaluate): its context and rows only
        from dpaudit.evaluation.reference_check import check_reference

        check_reference(reference, None, tok, ck.manifest, "the reference given to evaluate")
        return reference.eval()
    return base_model(ck, tok)


def _base_from_folder(ck, folder: Path, tok=None):
    """The base model in ``folder``, as training started from it: extended by the manifest's new tokens where the
    canaries own some (a base saved before they were added has no rows for them), checked against ``tok``."""
    from dpaudit.canaries import new_tokens
    from dpaudit.evaluation.reference_check import check_reference
    from dpaudit.tasks import models

    model, own = models.load_dir(folder)
    model = new_tokens.base_as_trained(model, own, ck.manifest).eval()
    check_reference(model, own, tok, ck.manifest, str(folder))
    return model


def base_model(ck, tok=None):
    """The model before fine-tuning: the LoRA checkpoint's base model (base_model/ or the adapter's local
    base), else the model spec of run.json rebuilt (pretrained weights, or the seeded initialisation the
    trainer started from); None if none is known. A folder's base is checked against ``tok``, the audited
    model's tokenizer."""
    from dpaudit.tasks import models

    if ck.path is not None and (ck.path / "base_model").exists():
        return _base_from_folder(ck, ck.path / "base_model", tok)
    if ck.path is not None and (ck.model_dir / "adapter_config.json").exists():
        return _base_from_folder(ck, ck.adapter_base(), tok)
    spec = ck.run.get("model")
    if spec:
        try:
            from dpaudit.canaries import new_tokens
            from dpaudit.trainers import pretrain

            try:
                built = models.ModelSpec(**spec)
            except DpauditError as e:
                raise DpauditError(f"{ck.path}/run.json: its model spec is not valid ({e}); restore the run.json the "
                                   "trainer wrote, or pass --reference-model") from None
            model, tok = pretrain.build(built)
            return new_tokens.base_as_trained(model, tok, ck.manifest).eval()  # as the trainer extended it
        except DpauditError:
            raise
        except Exception as e:  # noqa: BLE001 - a hand-edited or hostile run.json is bad input
            raise DpauditError(f"{ck.path}/run.json: its model spec cannot be rebuilt ({first_line(e)}); restore "
                               "the run.json the trainer wrote, or pass --reference-model") from None
    return None


def check_new_tokens(tok, manifest) -> None:
    """A new-token manifest's canaries need the tokenizer extended with their tokens (saved with the model)."""
    new = manifest.new_tokens()
    if new and any(t not in tok.get_vocab() for t in new[:1] + new[-1:]):
        raise DpauditError("these are new-token canaries but the checkpoint's tokenizer lacks their tokens; save the "
                           "tokenizer extended by dpaudit.api.add_canary_tokens beside the model")


def secret_spans(manifest) -> list[tuple[int, int]] | None:
    """Character span of each canary's secret when the plan scores the secret only (``score_on = "secret"``)."""
    if manifest.plan.score_on != "secret":
        return None
    spans = []
    for i, c in enumerate(manifest.canaries):
        start = len(manifest.plan.canary_prefix(i))
        spans.append((start, start + len(c.secret)))
    return spans


def check_context(model, tok, manifest, texts: list[str], framing: str) -> None:
    """Refuse canaries longer than the model's context (they would be cut, or crash the position embeddings), and
    canaries with no token a causal LM predicts under ``framing``: a record's first token has no context, so a
    canary that is its secret alone, framed without BOS (``tokenizer``: GPT-2's tokenizer adds none), has nothing
    to score (its loss would be a mean over no token). One tokenizer pass for both."""
    from dpaudit.attacks.scoring import encode

    if not texts:
        return
    seqs, masks = encode(tok, texts, None, None, framing, secret_spans(manifest))
    limit = context_limit(model, None)
    longest = max(len(s) for s in seqs)
    if limit is not None and longest > limit:
        raise DpauditError(f"a canary is {longest} tokens long but the model's context is {limit}; make the canary "
                           "template shorter (dpaudit canaries new --template)")
    empty = [i for i, m in enumerate(masks) if not any(m)]
    if empty:
        c = manifest.canaries[empty[0]]
        raise DpauditError(f"{len(empty)} of {len(texts)} canaries have no token to score under framing {framing!r} "
                           f"(canary {c.id}: its secret is the record's first token, which nothing predicts); plant "
                           "canaries with text before the secret (canaries new --random-prefix 40, or a template "
                           "such as 'My code is {secret}'), or pass --canary-framing bos_eos if your loop fed records "
                           "after a BOS token")


def _with_reference(ck, reference, wanted: list[str], score_fn, device=None,
                    tok=None) -> tuple[object, list[str], tuple]:
    """(score_fn(reference model) or None, the attacks that can run, notes): the reference attack is dropped
    with a note when no reference model is known. The reference model is moved to ``device`` (the audited
    model's)."""
    if "reference" not in wanted:
        return None, wanted, ()
    ref_model = _reference_model(ck, reference, tok)
    if ref_model is None:
        return None, [a for a in wanted if a != "reference"], (
            "reference attack skipped: no base model known; pass --reference-model",)
    return score_fn(ref_model.to(device) if device is not None else ref_model), wanted, ()


def _classifier(ck, model, tok, texts, settings: ScoringSettings, shard=None) -> CanaryScores:
    from dpaudit.attacks import classifier

    attacks, batch_size, max_len, reference = settings.attacks, settings.batch_size, settings.max_len, settings.reference

    use = [a for a in attacks if a in classifier.NAMES]
    skipped = [a for a in attacks if a not in classifier.NAMES]
    if not use:
        raise DpauditError(f"attacks {', '.join(attacks)} need a causal LM but this checkpoint is a sequence "
                           f"classifier; use {', '.join(classifier.NAMES)}")
    notes = (f"{', '.join(skipped)} skipped: token-level attacks need a causal LM, this is a classifier",) \
        if skipped else ()
    labels = ck.manifest.labels()
    lp = classifier.label_log_probs(model, tok, texts, labels, batch_size, max_len, shard=shard)
    ref_lp, use, more = _with_reference(ck, reference, use, lambda m: classifier.label_log_probs(
        m, tok, texts, labels, batch_size, max_len, shard=shard), model_device(model), tok)
    return CanaryScores(classifier.scores(lp, ref_lp, use), None, notes + more)


def _causal_lm(ck, model, tok, texts, settings: ScoringSettings, shard=None) -> CanaryScores:
    from dpaudit.attacks import BLACK_BOX
    from dpaudit.attacks.scoring import token_features

    attacks, batch_size, reference, framing = settings.attacks, settings.batch_size, settings.reference, settings.framing

    scores: dict[str, np.ndarray] = {}
    notes: tuple = ()
    black = [a for a in attacks if a in BLACK_BOX]
    spans = secret_spans(ck.manifest)  # None: the whole record is scored
    scored = texts if spans is None else [c.secret for c in ck.manifest.canaries]  # what zlib compresses
    if black:
        moments = any(BLACK_BOX[a].NEEDS_MOMENTS for a in black)
        feats = token_features(model, tok, texts, batch_size=batch_size, moments=moments, framing=framing,
                               shard=shard, spans=spans)
        ref_feats, black, notes = _with_reference(
            ck, reference, black, lambda m: token_features(m, tok, texts, batch_size=batch_size, framing=framing,
                                                           shard=shard, spans=spans), model_device(model), tok)
        mine = [i for i, f in enumerate(feats) if f is not None]  # all of them unless sharded
        for a in black:
            col = np.full(len(texts), np.nan)
            col[mine] = BLACK_BOX[a].from_features([feats[i] for i in mine], [scored[i] for i in mine],
                                                   reference_feats=None if ref_feats is None else
                                                   [ref_feats[i] for i in mine])
            scores[a] = col
    wanted = [a for a in attacks if a in options.FINAL_WEIGHTS_ATTACKS]
    if wanted:
        got, more = final_weights(ck, model, tok, framing, batch_size, shard, reference)
        notes += more
        scores.update({a: got[a] for a in wanted if got})
    exposure = None
    if "exposure" in attacks and ck.manifest.plan.space_size is None:
        notes += ("exposure skipped: new-token canaries share no randomness space to rank a secret in",)
    elif "exposure" in attacks:
        exposure = _exposure(ck.manifest, model, tok, settings, len(texts), shard)
        scores["exposure"] = -exposure.canary_bits
    return CanaryScores(scores, exposure, notes)




def final_weights(ck, model, tok, framing: str, batch_size: int, shard=None, reference=None) -> tuple[dict, tuple]:
    """(the final-weights scores of every canary, notes): each canary's new-token output rows against their
    initial state (zero, or the seeded rows of the base model the manifest's tokens extend), projected on the
    final model's predicting states (attacks/final_weights.py). Empty, with a note saying why, when the canaries
    own no rows, the initial rows cannot be known, or the rows did not move (a LoRA run trains adapters only)."""
    from dpaudit.attacks import final_weights as fw
    from dpaudit.attacks.scoring import encode, owns
    from dpaudit.canaries import new_tokens

    man = ck.manifest
    if not man.plan.owns_rows:
        return {}, (f"final-weights scores skipped: {man.plan.design} canaries own no rows of the model (use design "
                    "new-token)",)
    check_new_tokens(tok, man)
    ids = new_tokens.token_ids(tok, man)
    L = man.plan.length
    if not man.plan.rows_from_base:
        initial = None
    else:
        base = _reference_model(ck, reference, tok)
        if base is None:
            return {}, ("final-weights scores skipped: the new rows' seeded initial state needs the base model "
                        "(run.json's model spec or base_model/); pass --reference-model or plant zero-initialised "
                        "canaries (canaries.init = \"zero\")",)
        if base.get_output_embeddings() is None or base.get_output_embeddings().weight.shape[0] <= max(ids):
            raise DpauditError("the base model has no row for every new canary token; pass the base before "
                               "fine-tuning (dpaudit extends it as dpaudit.api.add_canary_tokens did)")
        initial = fw.row_change(base, ids, None)
    if model.get_output_embeddings() is None or model.get_output_embeddings().weight.shape[0] < max(ids) + 1:
        raise DpauditError("the model has no output embedding row for every new canary token; save the model "
                           "resized by dpaudit.api.add_canary_tokens")
    change = fw.row_change(model, ids, initial).view(len(man.canaries), L, -1)
    if not bool(change.abs().sum() > 0):
        return {}, ("final-weights scores skipped: no new token's output row moved in training (the output "
                    "embedding was frozen, as under LoRA; peft's modules_to_save=['lm_head'], or "
                    "trainable_token_indices with tied embeddings, trains it)",)
    seqs, _ = encode(tok, [c.text for c in man.canaries], None, None, framing)
    targets = []
    for i, s in enumerate(seqs):
        own = ids[i * L:(i + 1) * L]
        pos = [next((p for p, t in enumerate(s) if t == tid and p > 0), None) for tid in own]
        if None in pos:
            raise DpauditError(f"canary {man.canaries[i].id} does not tokenise to its own new tokens; save the "
                               "tokenizer extended by dpaudit.api.add_canary_tokens beside the model")
        targets.append(pos)
    states = fw.predicting_states(model, seqs, targets, pad_id(tok), batch_size)
    got = fw.scores(change, states)
    if shard is not None:  # every shard reads all rows (the centring needs them) and keeps its own canaries
        keep = np.array([owns(shard, j // batch_size) for j in range(len(man.canaries))])
        got = {a: np.where(keep, v, np.nan) for a, v in got.items()}
    return got, ()


def _exposure(man, model, tok, settings: ScoringSettings, n_canaries: int, shard=None) -> ExposureScores:
    from dpaudit.attacks import exposure as exposure_attack

    batch_size, n_references, enumerate_limit = settings.batch_size, settings.n_references, settings.enumerate_limit
    framing = settings.framing

    p = man.plan
    if enumerate_whole_space(p, model, enumerate_limit):
        from dpaudit.attacks import exposure_trie

        space = list(exposure_attack.enumerate_space(p.alphabet, p.length))
        bar = progress.bar(desc="exposure: token trie over the whole space", unit=" nodes", total=0)

        def more(n):  # each group's trie is built before its forward passes: the bar's total grows with them
            bar.total += n
            bar.refresh()
        bits = exposure_trie.log_probs(model, tok, p.prefix, space, p.suffix, 4 * batch_size, framing=framing,
                                       progress=bar.update, shard=shard, on_total=more)
        bar.close()
        index = {s: i for i, s in enumerate(space)}
        can = np.array([index[c.secret] for c in man.canaries])
        others = np.ones(len(space), dtype=bool)
        others[can] = False
        return ExposureScores(bits[can], bits[others], True, suffix_scored=False)
    refs = man.reference_secrets(n_references)
    bar = progress.bar(total=None if shard else len(refs) + n_canaries, desc="exposure")
    px_can = exposure_attack.log_perplexities(model, tok, p.prefix, [c.secret for c in man.canaries], p.suffix,
                                              4 * batch_size, progress=bar.update, framing=framing, shard=shard)
    px_ref = exposure_attack.log_perplexities(model, tok, p.prefix, refs, p.suffix, 4 * batch_size,
                                              progress=bar.update, framing=framing, shard=shard)
    bar.close()
    return ExposureScores(np.asarray(px_can), np.asarray(px_ref), False)


whitebox = readback.whitebox  # the white-box records, read back with no model (dpaudit/probe/readback.py)
