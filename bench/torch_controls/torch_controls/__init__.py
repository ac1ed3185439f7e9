"""PyTorch's own CPU kernels as correct controls (issue #32): the ops under test are torch's, the references are
written from the math in float64."""
