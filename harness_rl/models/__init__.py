"""Embedded default models: a registry and a one-time fetch-and-convert into a local HF model directory."""
