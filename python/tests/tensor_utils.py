"""Tensor helpers shared by the Python tests (torch is imported by the callers first; nothing here
imports it at module level, so CPU-only test files can import this before skipping)."""


def rel(got, want):
    """‖got − want‖ / ‖want‖ in fp32 (the relative L2 error every accuracy test uses)."""
    got, want = got.float(), want.float()
    return ((got - want).norm() / want.norm().clamp_min(1e-30)).item()


def rnd(*shape, dtype=None, seed=0, scale=1.0):
    """Seeded standard-normal CUDA tensor times `scale`, cast to `dtype` (default float32)."""
    import torch
    g = torch.Generator(device="cuda").manual_seed(seed)
    t = torch.randn(*shape, device="cuda", generator=g) * scale
    return t if dtype is None else t.to(dtype)
