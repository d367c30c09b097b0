"""Final-weights scores: what the checkpoint itself shows about canaries that own rows of their own (torch only).

A new-token canary (dpaudit/canaries/new_tokens.py) owns its tokens' rows of the output embedding. Every canary's
rows start from a state known without the run (zero, or the seeded initialisation its manifest regenerates), so
the final checkpoint's rows minus that state are the sum of everything training added to them: the canary's own
clipped gradients (when it was inserted), the shared push of the softmax from every other record, and the noise.

Two scores, one float per canary, higher = member:

* ``final_weights`` — the change of each canary's rows, centred on the mean change over all canaries (which
  removes the push the softmax gives every new row alike; a label-free step), projected on the unit direction
  its own gradient pushes a row: the hidden state that predicts the token in the final model (the input of the
  output embedding at the position before it). Summed over the canary's tokens.
* ``final_weights_norm`` — the squared L2 change of the rows since initialisation (Panda et al., ICLR 2025).

Both read only the final weights, the manifest and the known initial rows: post-processing of the mechanism's
output, so the one-run analysis over the manifest's fair coins stays valid (docs/methods.md, "Final weights").
"""

from __future__ import annotations

import numpy as np

NAMES = ("final_weights", "final_weights_norm")


def row_change(model, token_ids: list[int], initial):
    """(n, d) float64 tensor: the change of the output embedding's rows ``token_ids`` since ``initial`` ((n, d);
    None: zero)."""
    import torch

    w = model.get_output_embeddings().weight.detach()
    rows = w[torch.as_tensor(token_ids, device=w.device)].double().cpu()
    return rows if initial is None else rows - initial.double().cpu()


def predicting_states(model, seqs: list[list[int]], targets: list[list[int]], pad: int, batch_size: int = 32):
    """(n, L, d) float64: for each sequence i and each of its L target positions ``targets[i]`` (indices into
    ``seqs[i]``), the input of the output embedding at the position before it (the state whose logits predict
    that token). Read through a forward hook, so any causal LM with an output embedding is served."""
    import torch

    from dpaudit.tokens import model_device, pad_batch

    out_emb = model.get_output_embeddings()
    grabbed: list[torch.Tensor] = []
    handle = out_emb.register_forward_hook(lambda mod, inp, out: grabbed.append(inp[0].detach()))
    was_training = model.training
    model.eval()
    device = model_device(model)
    states = []
    try:
        with torch.inference_mode():
            for a in range(0, len(seqs), batch_size):
                chunk = seqs[a:a + batch_size]
                ids, mask, pos = pad_batch(chunk, pad, device)
                grabbed.clear()
                model(input_ids=ids, attention_mask=mask, position_ids=pos)
                h = grabbed[-1].double().cpu()
                for j, t in enumerate(targets[a:a + batch_size]):
                    states.append(h[j, torch.as_tensor(t) - 1])
    finally:
        handle.remove()
        model.train(was_training)
    return torch.stack(states)


def scores(change, states) -> dict[str, np.ndarray]:
    """Both scores from ``change`` (m, L, d): each canary's L rows' change since initialisation, and ``states``
    (m, L, d): the hidden states that predict them in the final model."""
    centred = change - change.mean(0, keepdim=True)
    unit = states / states.norm(dim=-1, keepdim=True).clamp_min(1e-12)
    return {"final_weights": (centred * unit).sum(-1).sum(-1).numpy(),
            "final_weights_norm": (change ** 2).sum(-1).sum(-1).numpy()}

