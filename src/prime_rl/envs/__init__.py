"""Environments: task sources and verifiers, registered by name (see base.py)."""
