"""Random draws that give the same numbers on every device.

Every generator mercer makes lives on the CPU (:func:`mercer._backend.make_generator`), and every
draw is made there and then moved to the data's device: a model fitted with ``random_state=0`` on
a GPU picks the same landmarks, frequencies and initial centres as on the CPU (CUDA generators
produce other streams). The draws are small (indices, frequency matrices); the one large one,
sampling from a weight vector over n points, is done by inverse CDF on the weights' device with
uniforms drawn on the CPU.
"""

from __future__ import annotations

import torch

__all__ = ["categorical", "rand", "randint", "randperm", "sample_without_replacement"]


def rand(generator: torch.Generator, size, *, dtype=torch.float64, device=None) -> torch.Tensor:
    """Uniform [0, 1) draws of shape ``size``, made on the generator's device, returned on ``device``."""
    out = torch.rand(size, generator=generator, dtype=dtype, device=generator.device)
    return out if device is None else out.to(device)


def randint(generator: torch.Generator, high: int, size, *, device=None) -> torch.Tensor:
    """Integers in ``[0, high)`` of shape ``size``, returned on ``device``."""
    out = torch.randint(high, size, generator=generator, device=generator.device)
    return out if device is None else out.to(device)


def randperm(generator: torch.Generator, n: int, *, device=None) -> torch.Tensor:
    """A random permutation of ``range(n)``, returned on ``device``."""
    out = torch.randperm(n, generator=generator, device=generator.device)
    return out if device is None else out.to(device)


def categorical(generator: torch.Generator, weights: torch.Tensor, k: int = 1) -> torch.Tensor:
    """``k`` indices drawn with replacement with probabilities proportional to ``weights`` (>= 0,
    any device): inverse CDF of the float64 cumulative sum with CPU uniforms; indices on the
    weights' device. Zero-weight entries are never drawn."""
    cum = torch.cumsum(weights.to(torch.float64), 0)
    u = rand(generator, (k,), device=weights.device) * cum[-1]
    return torch.searchsorted(cum, u, right=True).clamp_(max=weights.numel() - 1)


def sample_without_replacement(generator: torch.Generator, weights: torch.Tensor, k: int) -> torch.Tensor:
    """``k`` distinct indices drawn with probabilities proportional to ``weights`` (successive
    draws, as ``torch.multinomial(replacement=False)``), made on the CPU; indices on the weights'
    device."""
    w = weights.detach().to(device=generator.device, dtype=torch.float64)
    return torch.multinomial(w, k, replacement=False, generator=generator).to(weights.device)
