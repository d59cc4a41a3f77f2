"""Device-independent random draws (mercer._random): CPU generators, draws moved to the data."""

from __future__ import annotations

import numpy as np
import torch

from mercer import _random as rnd
from mercer._backend import make_generator

from conftest import cuda


def test_categorical_follows_the_weights_and_never_draws_zero_weights():
    w = torch.tensor([0.0, 1.0, 0.0, 3.0, 0.0, 6.0], dtype=torch.float64)
    draws = rnd.categorical(make_generator(0), w, 20_000).numpy()
    assert not np.isin(draws, [0, 2, 4]).any()
    freq = np.bincount(draws, minlength=6)[[1, 3, 5]] / len(draws)
    np.testing.assert_allclose(freq, [0.1, 0.3, 0.6], atol=0.015)  # ~4 standard errors


def test_integer_weights_draw_like_repeated_rows():
    """Inverse CDF: weight 2 on a row is the same draw as the row twice (in the same order)."""
    w = torch.tensor([1.0, 2.0, 0.0, 1.0], dtype=torch.float64)
    repeated_owner = torch.tensor([0, 1, 1, 3])  # rows of the repeated data set
    a = rnd.categorical(make_generator(5), w, 50)
    b = rnd.categorical(make_generator(5), torch.ones(4, dtype=torch.float64), 50)
    assert torch.equal(a, repeated_owner[b])


def test_sample_without_replacement_is_distinct_and_on_the_weights_device():
    w = torch.rand(100, dtype=torch.float64)
    idx = rnd.sample_without_replacement(make_generator(1), w, 30)
    assert idx.unique().numel() == 30 and idx.device == w.device


@cuda
def test_draws_are_the_same_on_cpu_and_gpu():
    w = torch.rand(1000, dtype=torch.float64)
    for fn in (lambda d: rnd.categorical(make_generator(3), w.to(d), 7),
               lambda d: rnd.randperm(make_generator(3), 50, device=d),
               lambda d: rnd.rand(make_generator(3), (5,), device=d)):
        assert torch.equal(fn("cpu"), fn("cuda").cpu())
