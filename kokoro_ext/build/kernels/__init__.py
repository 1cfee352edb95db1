"""Kernels written in TIR, for targets without the native library."""
