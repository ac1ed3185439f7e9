"""The torch example's ops (swiglu.py, rmsnorm.py) and their fp64 references (reference.py)."""
