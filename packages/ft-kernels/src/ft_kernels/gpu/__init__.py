"""Triton kernels for the device side of the expert hierarchy. Checked on the CPU under
TRITON_INTERPRET=1 against the torch references in ``ft_kernels.reference``."""
