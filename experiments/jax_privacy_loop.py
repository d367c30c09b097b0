"""DP-SGD written with jax-privacy 2.0's own components and optax, the functional probe's two calls around the
privatizer (docs/probe.md "Any loop"; issue wave 5 · 3/5 item 5): Poisson batches from
``batch_selection.CyclicPoissonSampling``, the clipped sum from ``clipping.clipped_grad`` (jitted, batches padded to
a multiple of 64 with weight 0), the noise from ``noise_addition.gaussian_privatizer``, ``optax.sgd``. Bugs planted in
that mechanism: ``half-noise``, ``no-clip``, ``wrong-rate`` (the loop samples at twice the card's q).

Run by tests/probe/test_jax_loop.py and by the conformance suite (experiments/probe_loops.py, loop ``jax-privacy``);
jax is an optional extra (`make test-jax`).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

N, Q, C, SIGMA, T, LR = 400, 0.1, 0.05, 1.0, 60, 0.5
SIZES = {"w1": (12, 16), "b1": (16,), "w2": (16, 3), "b2": (3,)}
BUGS = ("half-noise", "no-clip", "wrong-rate")


def _loss(params, x, y, w):
    """Cross-entropy of a two-layer MLP on the slice jax-privacy hands in (one example), times its weight (0 for the
    padding jax-privacy's ``pad_to_multiple_of`` adds, so that a few batch shapes compile, not one per size)."""
    import jax
    import jax.numpy as jnp

    h = jnp.tanh(x @ params["w1"] + params["b1"])
    logits = h @ params["w2"] + params["b2"]
    return -jnp.mean(w * jnp.take_along_axis(jax.nn.log_softmax(logits), y[:, None], axis=1)[:, 0])


def run(bug: str | None, seed: int, folder: Path, *, steps: int = T, m: int = 200, on_fail: str | None = None):
    """``steps`` steps of jax-privacy DP-SGD on N records with the probe attached, saved into ``folder`` beside the
    card the loop states (Poisson q, sigma, C, B = qN, PRV at delta 1e-5). Returns (probe, card, folder, params)."""
    import jax
    import jax.numpy as jnp
    import optax
    from jax_privacy import batch_selection, clipping, noise_addition
    from safetensors.numpy import save_file

    from dpaudit import accounting, api
    from dpaudit.accounting import SubsampledGaussian
    from dpaudit.claim.card import Claim, PrivacyCard

    if bug not in (None, *BUGS):
        raise ValueError(f"unknown bug {bug!r}; one of {', '.join(BUGS)}")
    rng = np.random.default_rng(seed)
    x = jnp.asarray(rng.normal(size=(N, 12)), dtype=jnp.float32)
    y = jnp.asarray(rng.integers(0, 3, size=N))
    key = jax.random.key(seed)
    params = {k: 0.3 * jax.random.normal(jax.random.fold_in(key, i), s) for i, (k, s) in enumerate(SIZES.items())}
    B = Q * N
    probe = api.functional_probe(dict(SIZES), sample_rate=Q, clipping_norm=C, noise_multiplier=SIGMA,
                                 expected_batch_size=B, m=m, seed=seed, dataset_size=N, on_fail=on_fail)
    sampler = batch_selection.CyclicPoissonSampling(sampling_prob=2 * Q if bug == "wrong-rate" else Q, iterations=steps)
    grad_fn = jax.jit(clipping.clipped_grad(_loss, l2_clip_norm=math.inf if bug == "no-clip" else C,
                                            batch_argnums=(1, 2, 3)))
    privatizer = noise_addition.gaussian_privatizer(stddev=SIGMA * C / (2 if bug == "half-noise" else 1),
                                                    prng_key=jax.random.fold_in(key, 99))
    noise_state = privatizer.init(params)
    opt = optax.sgd(LR)
    opt_state = opt.init(params)
    for idx in sampler.batch_iterator(N, rng=seed):
        padded = batch_selection.pad_to_multiple_of(idx, 64)  # -1: padding, weight 0 (an empty batch: all padding)
        clipped = grad_fn(params, x[np.maximum(padded, 0)], y[np.maximum(padded, 0)],
                          jnp.asarray(padded >= 0, dtype=jnp.float32))
        clipped = probe.add_canaries({k: np.asarray(v) for k, v in clipped.items()}, records=len(idx))  # 1.
        noisy, noise_state = privatizer.update(sum_of_clipped_grads={k: jnp.asarray(v) for k, v in clipped.items()},
                                               noise_state=noise_state)
        update = jax.tree.map(lambda g: g / B, noisy)
        probe.observe({k: np.asarray(v) for k, v in update.items()})  # 2. the update optax applies
        updates, opt_state = opt.update(update, opt_state, params)
        params = optax.apply_updates(params, updates)
    folder.mkdir(parents=True, exist_ok=True)
    event = SubsampledGaussian(Q, SIGMA, steps, "poisson")
    card = PrivacyCard(claim=Claim(epsilon=accounting.compute([event], 1e-5, "prv").epsilon, delta=1e-5),
                       events=[event], clipping_norm=C, expected_batch_size=B, dataset_size=N, method="jax-privacy")
    card.save(folder / "privacy_card.json")
    save_file({k: np.asarray(v) for k, v in params.items()}, str(folder / "model.safetensors"))  # the model
    probe.save(folder, weights=params)  # its fingerprint: `dpaudit evaluate` checks the saved weights are these
    return probe, card, folder, params
