"""gpuemu-ci: a correctness gate for GPU kernels."""

__version__ = "0.1.0"


def check(*args, **kwargs):  # type: ignore[no-untyped-def]
    """Fuzz a callable with an op's schema from gpuemu.toml; see gpuemu_ci.api.check."""
    from gpuemu_ci.api import check as _check

    return _check(*args, **kwargs)


__all__ = ["__version__", "check"]
