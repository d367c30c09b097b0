"""Is a model that loads as a causal LM really one? Checked by its outputs, for any architecture.

``AutoModelForCausalLM`` also loads checkpoints that do not predict left to right: a BERT masked LM becomes a
``BertLMHeadModel`` whose attention stays bidirectional (``is_decoder = False``: transformers only warns), and an
XLNet LM head attends both ways by default. Every score dpaudit reads (a token's log-probability given the ones
before it) would then see the token itself. The test: change the second half of a probe text, and no logit of
the first half may move.
"""

from __future__ import annotations

import torch

from dpaudit.errors import DpauditError
from dpaudit.tokens import context_limit

PROBE_TEXT = "The audit reads every record once, and nothing else."
TOLERANCE = 1e-5  # relative to the logits' scale: a causal LM computes the two rows' shared positions identically
# (exactly 0 for every architecture tried, float32, and SmolLM2 in bfloat16 and float16); a random one-layer BERT
# moves them by 3e-4, a trained one by O(1)
HALF_TOLERANCE = 1e-3  # float16 and bfloat16, for kernels that round the two rows of a batch apart


@torch.inference_mode()
def check_causal(model, tokenizer, where: str) -> None:
    """Refuse, in one line, a model whose earlier positions' logits depend on a later token.

    Args:
        model: The Hugging Face model loaded for causal language modelling (any device, any dtype).
        tokenizer: Its tokenizer (encodes a fixed probe text).
        where: What to name in the error (the folder, or ``evaluate``).

    Raises:
        DpauditError: The model is not causal (a masked LM loaded through ``AutoModelForCausalLM``).
    """
    limit = context_limit(model, 12)
    ids = list(tokenizer(PROBE_TEXT, add_special_tokens=False).input_ids)[:min(12, limit)]  # within its context
    rows = model.get_input_embeddings().weight.shape[0]
    if len(ids) < 3 or max(ids) >= rows:
        return  # a tokenizer that cannot give a probe the model embeds is refused by the loader's own checks
    k = len(ids) // 2
    other = ids[:k] + [(t + 1) % rows for t in ids[k:]]  # the second half changed: the first half's logits must not
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    try:
        logits = model(input_ids=torch.tensor([ids, other], device=device)).logits
    finally:
        model.train(was_training)
    early = logits[:, :k]
    tol = TOLERANCE if model.dtype in (torch.float32, torch.float64) else HALF_TOLERANCE
    moved = float((early[0].float() - early[1].float()).abs().max())
    scale = float(early.float().abs().max()) or 1.0
    if moved > tol * scale:
        name = type(model).__name__
        decoder = getattr(model.config, "is_decoder", None)
        hint = " (its config has is_decoder = false: a masked LM's weights)" if decoder is False else ""
        raise DpauditError(f"{where}: {name} is not a causal language model{hint}: its logits at earlier positions "
                           "change when a later token does, so a token's score would see the token itself; audit "
                           "the causal LM that was fine-tuned (or a sequence classifier)")
