"""The functional probe on a real JAX loop (issue wave 5 · 3/5 item 5): DP-SGD written with jax-privacy 2.0's own
components — Poisson batches from ``batch_selection.CyclicPoissonSampling``, the clipped sum from
``clipping.clipped_grad``, the noise from ``noise_addition.gaussian_privatizer`` — and an optax optimizer, with the
probe's two calls around the privatizer (docs/probe.md "Any loop"). An honest run passes every check the functional
probe can make; half the noise, no clipping and a wrong sampling rate are each named by the check that should.

jax is not in the main install: `make test-jax` installs the `jax` extra (requirements-jax.txt) and runs this file;
`.ci/run` does both. Without jax the file is skipped.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
optax = pytest.importorskip("optax")
jp_batches = pytest.importorskip("jax_privacy.batch_selection")
jp_clipping = pytest.importorskip("jax_privacy.clipping")
jp_noise = pytest.importorskip("jax_privacy.noise_addition")

from dpaudit import api  # noqa: E402
from tests.probe.test_functional_probe import save_with_card  # noqa: E402
from tests.probe.test_probe import _checks  # noqa: E402

N, Q, C, SIGMA, T, LR = 400, 0.1, 0.05, 1.0, 60, 0.5
SIZES = {"w1": (12, 16), "b1": (16,), "w2": (16, 3), "b2": (3,)}


def _loss(params, x, y, w):
    """Cross-entropy of a two-layer MLP on the slice jax-privacy hands in (one example), times its weight (0 for the
    padding jax-privacy's ``pad_to_multiple_of`` adds, so that a few batch shapes compile, not one per size)."""
    h = jnp.tanh(x @ params["w1"] + params["b1"])
    logits = h @ params["w2"] + params["b2"]
    return -jnp.mean(w * jnp.take_along_axis(jax.nn.log_softmax(logits), y[:, None], axis=1)[:, 0])


def _run(tmp_path, bug=None, seed=0):
    """T steps of jax-privacy DP-SGD on N records with the probe attached; the card states (q, sigma, C, B = qN)."""
    rng = np.random.default_rng(seed)
    x = jnp.asarray(rng.normal(size=(N, 12)), dtype=jnp.float32)
    y = jnp.asarray(rng.integers(0, 3, size=N))
    key = jax.random.key(seed)
    params = {k: 0.3 * jax.random.normal(jax.random.fold_in(key, i), s) for i, (k, s) in enumerate(SIZES.items())}
    B = Q * N
    probe = api.functional_probe({k: s for k, s in SIZES.items()}, sample_rate=Q, clipping_norm=C,
                                 noise_multiplier=SIGMA, expected_batch_size=B, m=200, seed=seed, dataset_size=N,
                                 on_fail=None)
    sampler = jp_batches.CyclicPoissonSampling(sampling_prob=2 * Q if bug == "wrong-rate" else Q, iterations=T)
    grad_fn = jax.jit(jp_clipping.clipped_grad(_loss, l2_clip_norm=math.inf if bug == "no-clip" else C,
                                               batch_argnums=(1, 2, 3)))
    privatizer = jp_noise.gaussian_privatizer(stddev=SIGMA * C / (2 if bug == "half-noise" else 1),
                                              prng_key=jax.random.fold_in(key, 99))
    noise_state = privatizer.init(params)
    opt = optax.sgd(LR)
    opt_state = opt.init(params)
    for idx in sampler.batch_iterator(N, rng=seed):
        padded = jp_batches.pad_to_multiple_of(idx, 64)  # -1: padding, weight 0 (an empty batch: all padding)
        clipped = grad_fn(params, x[np.maximum(padded, 0)], y[np.maximum(padded, 0)],
                          jnp.asarray(padded >= 0, dtype=jnp.float32))
        clipped = probe.add_canaries({k: np.asarray(v) for k, v in clipped.items()}, records=len(idx))  # 1.
        noisy, noise_state = privatizer.update(sum_of_clipped_grads={k: jnp.asarray(v) for k, v in clipped.items()},
                                               noise_state=noise_state)
        update = jax.tree.map(lambda g: g / B, noisy)
        probe.observe({k: np.asarray(v) for k, v in update.items()})  # 2. the update optax applies
        steps, opt_state = opt.update(update, opt_state, params)
        params = optax.apply_updates(params, steps)
    folder = save_with_card(probe, tmp_path / f"jax-{bug}", q=Q, sigma=SIGMA, steps=T, clipping_norm=C, batch=B,
                            n=N, method="jax-privacy")
    return folder, params


def test_an_honest_jax_privacy_loop_passes_every_check_the_probe_makes(tmp_path):
    folder, params = _run(tmp_path)
    checks, entry = _checks(folder)
    assert {k: c["status"] for k, c in checks.items()} == {**dict.fromkeys(
        ("noise", "sampling", "clipping", "steps", "divisor"), "pass"), "coverage": "not tested"}, checks
    assert entry["mode"] == "functional"
    assert checks["noise"]["values"].get("rms", 1.0) == pytest.approx(1.0, rel=0.15)  # sigma, in units of C
    assert all(bool(jnp.all(jnp.isfinite(v))) for v in params.values())  # it trained


@pytest.mark.parametrize("bug,check", [("half-noise", "noise"), ("no-clip", "clipping"), ("wrong-rate", "sampling")])
def test_each_bug_planted_in_the_jax_loop_is_named(tmp_path, bug, check):
    folder, _ = _run(tmp_path, bug)
    checks, _ = _checks(folder)
    assert checks[check]["status"] == "fail", checks[check]
