"""``collect-rollouts`` on a disk that fills up mid-run (a real tmpfs, real ENOSPC): the first
write error stops the run with one line naming the file, every record written stays whole, and
the same command after freeing space completes the run with each pair exactly once."""

from __future__ import annotations

import subprocess
from collections import Counter

from tests.support.collect import cli_command, keys, write_tasks
from tests.support.disk import grow, small_tmpfs
from tests.support.http_server import LocalTestServer

from prime_rl.collect.store import find_torn_tail, iter_records

N = 600


def test_a_full_disk_stops_the_run_cleanly_and_the_rerun_completes_it_exactly_once(tmp_path):
    tasks = write_tasks(tmp_path / "tasks.jsonl", N)
    with small_tmpfs(tmp_path / "disk", 1) as disk, LocalTestServer() as server:
        out = disk / "out.jsonl"  # its log file and siblings are on the small disk too
        cmd = cli_command(
            tasks,
            out,
            server.base_url,
            "--responses_create_params.max_output_tokens",
            "400",  # ~2.5 KB per record: 1 MiB holds a few hundred
            "--parallel",
            "16",
            "--verify.workers",
            "0",
        )
        full = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        requests_when_full = server.state.requests
        assert full.returncode == 1, full.stderr[-3000:]
        err = full.stderr
        assert "Traceback" not in err and "never retrieved" not in err, err[-3000:]
        errors = [line for line in err.splitlines() if line.startswith("error:")]
        assert len(errors) == 1, err[-3000:]
        assert f"cannot write {out}" in errors[0] and "No space left on device" in errors[0], errors
        assert err.count("No space left on device") <= 2, err[-3000:]  # the error, and the log file's notice
        before = out.read_bytes()
        assert find_torn_tail(out) is None  # no partial record was left behind
        written = len(list(iter_records(out)))  # every line is a whole record
        assert 50 < written < N
        # the run stopped at the first failed write: no more than about one round of requests after it
        assert requests_when_full < written + 16 * 4

        grow(disk, 64)  # free space
        again = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        assert again.returncode == 0, again.stderr[-3000:]
        assert "resuming" in again.stderr
        assert out.read_bytes().startswith(before)  # nothing written before the failure was rewritten
        assert keys(out) == Counter({(t, 0): 1 for t in range(N)})
