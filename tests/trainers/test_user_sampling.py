"""Chua et al.'s sampling of a user's records (trainers/data.UserBatches, trainers/user_dp.py): user-wise DP-SGD
draws k of a sampled user's records, or k random chunks of its concatenated text, anew at every step (Alg. 2);
group privacy resamples users with fewer than k records up to k (Alg. 1); `user_sampling = "fixed"` keeps the
records chosen once."""

from collections import Counter

import numpy as np
import pytest
from scipy import stats

from dpaudit.errors import DpauditError
from dpaudit.run import config
from dpaudit.trainers import user_dp
from dpaudit.trainers.data import UserBatches


def _recs(user: int, n: int) -> list[dict]:
    return [{"input_ids": [1, 100 * user + j, 2], "targets": [-100, 100 * user + j, 2]} for j in range(n)]


def test_per_step_draws_are_k_distinct_own_records_uniform_over_steps():
    pool = {"a": _recs(1, 10), "b": _recs(2, 3)}
    ub = UserBatches(pool, pad_id=0, max_len=4, q=1.0, seed=0, per_step=4)
    seen = Counter()
    draws = []
    for _ in range(2000):
        a = ub.draw("a")
        ids = [r["input_ids"][1] for r in a]
        assert len(ids) == 4 and len(set(ids)) == 4 and all(100 <= i < 110 for i in ids)  # 4 distinct of its own
        seen.update(ids)
        draws.append(tuple(ids))
        assert [r["input_ids"][1] for r in ub.draw("b")] == [200, 201, 202]  # at most k: all of them, each step
    assert len(set(draws)) > 150  # a new draw at every step (210 subsets exist), not one fixed choice
    counts = [seen[100 + j] for j in range(10)]  # each record in 4/10 of the steps
    assert stats.chisquare(counts).pvalue > 1e-3, counts
    # gather stacks exactly the drawn records, each weighted 1/(records the user contributes this step)
    ids, mask, tgt, owner, w = ub.gather(["a", "b"], mean_over_users=False)
    assert ids.shape == (7, 4) and owner.tolist() == [0] * 4 + [1] * 3
    assert np.allclose(w.numpy(), [0.25] * 4 + [1 / 3] * 3)


def test_random_chunks_are_windows_of_the_concatenated_text_across_records():
    stream = list(range(10, 40))  # a user's records' tokens, concatenated (30 tokens)
    ub = UserBatches({"a": _recs(1, 5)}, pad_id=0, max_len=8, q=1.0, seed=1, per_step=3, streams={"a": stream})
    starts = Counter()
    for _ in range(3000):
        chunks = ub.draw("a")
        assert len(chunks) == 3
        for c in chunks:
            s = c["input_ids"][0] - 10
            assert c["input_ids"] == stream[s:s + 8] and c["targets"] == [-100] + stream[s + 1:s + 8]
            starts[s] += 1
    assert sorted(starts) == list(range(23))  # every offset 0..30-8, boundaries crossed
    assert stats.chisquare([starts[s] for s in range(23)]).pvalue > 1e-3
    short = UserBatches({"b": []}, pad_id=0, max_len=8, q=1.0, seed=1, per_step=3, streams={"b": [5, 6, 7]})
    assert short.draw("b") == [{"input_ids": [5, 6, 7], "targets": [-100, 6, 7]}]  # shorter than a window: once


def test_group_privacy_pads_users_to_k_with_their_own_records():
    capped = {"a": ["x1", "x2"], "b": [f"y{i}" for i in range(5)], "c": ["z"]}
    padded = user_dp.pad_to_k(capped, 5, seed=0)
    assert all(len(v) == 5 for v in padded.values())
    assert padded["b"] == capped["b"] and padded["a"][:2] == ["x1", "x2"] and set(padded["a"]) <= {"x1", "x2"}
    assert padded["c"] == ["z"] * 5
    assert user_dp.pad_to_k(capped, 5, seed=0) == padded  # seeded


def test_the_option_and_which_runs_draw_per_step():
    def trainer(**train):
        return config.parse({"task": {"name": "userlm"}, "train": train,
                             "variants": [{"name": "v", "target_epsilon": 3}]}).variants[0].trainer

    assert user_dp.per_step_draws(trainer(method="user_dp_sgd"))  # the default is the paper's
    assert user_dp.per_step_draws(trainer(method="user_dp_sgd", selection="random_chunk"))
    assert not user_dp.per_step_draws(trainer(method="user_dp_sgd", selection="longest"))  # deterministic
    assert not user_dp.per_step_draws(trainer(method="user_dp_sgd", user_sampling="fixed"))
    assert not user_dp.per_step_draws(trainer(method="group_privacy"))
    with pytest.raises(DpauditError, match="train.user_sampling must be one of paper, fixed"):
        trainer(method="user_dp_sgd", user_sampling="per-step")
