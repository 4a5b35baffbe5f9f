"""Test helpers (fault injectors, fake servers, reference code, synthetic logs); never shipped."""

from pathlib import Path

FAULTY_ENV = f"{Path(__file__).parent / 'faulty_env.py'}:FaultyEnv"
"""The misbehaving environment as a file spec, so spawned processes load it without sys.path setup."""
