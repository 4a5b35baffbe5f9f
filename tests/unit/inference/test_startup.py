"""What ``inference`` refuses before it starts vLLM: an address beyond loopback without an admin
token (as vLLM will really bind it, pass-through flags included) and vLLM's dev mode without one.

``main`` runs for real up to vLLM's argument parser; ``serve`` is replaced, so no engine starts.
"""

from __future__ import annotations

import json

import pytest

from prime_rl.inference.config import is_loopback


@pytest.fixture
def run_main(monkeypatch, tmp_path, capsys):
    """``main(argv)`` with a fake ``serve``: returns (exit code, served (config, args) or None, stderr)."""
    import prime_rl.inference.main as main_mod
    import prime_rl.inference.server as server

    for name in ("PRIME_ADMIN_TOKEN", "VLLM_SERVER_DEV_MODE", "PRIME_RL_LAUNCHER_PID"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(main_mod, "setup_logging", lambda *a, **k: None)
    monkeypatch.setattr(main_mod, "intercept_stdlib", lambda *a, **k: None)
    monkeypatch.setattr(server, "prepare_environment", lambda: None)  # leave os.environ alone
    served: list = []

    async def fake_serve(config, args):
        served.append((config, args))

    monkeypatch.setattr(server, "serve", fake_serve)

    def run(*argv: str) -> tuple[int, tuple | None, str]:
        served.clear()
        capsys.readouterr()
        try:
            main_mod.main(["--model", "m", "--output_dir", str(tmp_path), *argv])
            code = 0
        except SystemExit as e:
            code = e.code
        return code, (served[0] if served else None), capsys.readouterr().err

    return run


@pytest.mark.parametrize(
    "host,loopback",
    [
        ("127.0.0.1", True),
        ("127.3.2.1", True),
        ("::1", True),
        ("localhost", True),
        ("", False),
        (None, False),
        ("0.0.0.0", False),
        ("::", False),
        ("10.0.0.5", False),
        ("::ffff:127.0.0.1", False),  # conservative: only the listed forms count
        ("my-host", False),
        (" 127.0.0.1", False),
    ],
)
def test_only_127_8_ipv6_loopback_and_localhost_are_loopback(host, loopback):
    assert is_loopback(host) is loopback


@pytest.mark.parametrize(
    "argv,shown",
    [
        (["--host", ""], "''"),
        (["--", "--host", "0.0.0.0"], "0.0.0.0"),  # vLLM's parser takes the last --host
        (["--", "--ho", "10.1.2.3"], "10.1.2.3"),  # and accepts abbreviations
        (["--vllm_args", '["--host", "::"]'], "::"),
    ],
)
def test_binding_beyond_loopback_without_token_is_refused(run_main, argv, shown):
    code, served, err = run_main(*argv)
    assert code == 2 and served is None
    lines = err.strip().splitlines()
    assert lines[0].startswith("error: ")
    if argv[0] != "--host":  # seen only in vLLM's parsed arguments: one line
        assert len(lines) == 1
    # else the config's validator refuses it (rl too, before anything starts): its usual format
    assert shown in lines[-1] and "admin_token" in lines[-1]


def test_passed_through_host_and_port_are_the_ones_checked_and_reported(run_main, monkeypatch, tmp_path):
    code, served, _ = run_main("--", "--host", "127.0.0.2", "--port", "9123")
    assert code == 0
    config, args = served
    assert (args.host, args.port) == ("127.0.0.2", 9123)
    assert (config.host, config.port) == ("127.0.0.2", 9123)
    resolved = json.loads((tmp_path / "configs" / "inference.json").read_text())
    assert (resolved["host"], resolved["port"]) == ("127.0.0.2", 9123)

    monkeypatch.setenv("PRIME_ADMIN_TOKEN", "tok")
    code, served, _ = run_main("--", "--host", "0.0.0.0")
    assert code == 0 and served[1].host == "0.0.0.0"


@pytest.mark.parametrize("value", ["1", "true"])
def test_vllm_dev_mode_without_token_is_refused(run_main, monkeypatch, value):
    monkeypatch.setenv("VLLM_SERVER_DEV_MODE", value)
    code, served, err = run_main()
    assert code == 2 and served is None
    assert len(err.strip().splitlines()) == 1 and "VLLM_SERVER_DEV_MODE" in err and "admin_token" in err


def test_vllm_dev_mode_with_token_starts(run_main, monkeypatch):
    monkeypatch.setenv("VLLM_SERVER_DEV_MODE", "1")
    monkeypatch.setenv("PRIME_ADMIN_TOKEN", "tok")
    code, served, _ = run_main()
    assert code == 0 and served is not None
    monkeypatch.setenv("VLLM_SERVER_DEV_MODE", "0")
    monkeypatch.delenv("PRIME_ADMIN_TOKEN")
    code, served, _ = run_main()
    assert code == 0 and served is not None


def test_vllm_dev_routes_are_found_in_vllm():
    from prime_rl.inference.server import vllm_dev_paths

    paths = vllm_dev_paths()
    assert {"/collective_rpc", "/sleep", "/pause", "/update_weights"} <= set(paths)


def test_vllm_control_routes_are_found_in_vllm():
    from prime_rl.inference.server import vllm_control_paths

    assert {"/scale_elastic_ep", "/is_scaling_elastic_ep"} <= set(vllm_control_paths())
