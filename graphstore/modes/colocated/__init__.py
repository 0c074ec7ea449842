"""Colocated mode: each compute machine holds its own partition and samples from it in-process (no storage processes)."""
