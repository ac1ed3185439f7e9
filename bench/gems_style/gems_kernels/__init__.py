"""Triton kernels written the way FlagGems writes its operators (issue #48's second Triton suite)."""
