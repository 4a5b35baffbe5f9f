"""Fixtures shared by unit and integration tests."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from prime_rl.dev.tiny_model import build_tiny_model

ADMIN_TOKEN = "test-admin-token"


def pytest_collection_modifyitems(config, items):
    try:
        import torch

        has_gpu = torch.cuda.is_available()
    except Exception:
        has_gpu = False
    if has_gpu:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    """The tiny random Qwen2 model with its locally trained tokenizer (built once per session)."""
    return build_tiny_model(tmp_path_factory.mktemp("tiny-model"))


@pytest.fixture(scope="session")
def inference_server(tiny_model, tmp_path_factory):
    """One real vLLM inference server (CPU) on the tiny model for the whole test session."""
    from prime_rl.dev.server import start_server

    output_dir = tmp_path_factory.mktemp("inference-run")
    server = start_server(tiny_model, output_dir, admin_token=ADMIN_TOKEN)
    try:
        server.wait_ready(timeout_s=float(os.environ.get("PRIME_TEST_SERVER_TIMEOUT", "420")))
        yield server
    finally:
        server.stop()
