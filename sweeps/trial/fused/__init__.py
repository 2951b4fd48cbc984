"""Fused trials, the worker's side."""
