"""benchmarks/trainer_gpu.py: its FLOP count is the documented formula, its batches hold what it
says, and a run on CPU (the tiny shape) writes a row per configuration whose parts add up."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

from transformers import AutoModelForCausalLM

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks" / "trainer_gpu.py"


def _bench():
    spec = importlib.util.spec_from_file_location("trainer_gpu", BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_flops_are_six_n_per_token_plus_causal_attention_per_sample(tiny_model):
    bench = _bench()
    model = AutoModelForCausalLM.from_pretrained(tiny_model)
    c = model.config  # untied: the input embedding multiplies nothing
    n = sum(p.numel() for p in model.parameters()) - c.vocab_size * c.hidden_size
    assert bench.matmul_params(model) == n
    attention = 6 * c.num_hidden_layers * c.num_attention_heads * c.head_dim * (100**2 + 30**2)
    assert bench.step_flops(model, [100, 30]) == 6 * n * 130 + attention


def test_a_step_is_the_tokens_asked_for_in_packed_samples():
    mbs, lengths = _bench().micro_batches(512, 2048, 4096, vocab=100, seed=0)
    assert lengths == [512] * 8 and len(mbs) == 2
    for mb in mbs:
        assert mb.num_samples == 4 and mb.input_ids.numel() == 2048
        assert mb.sample_ids.tolist() == [i for i in range(4) for _ in range(512)]
        assert mb.loss_mask.view(4, 512)[:, :64].sum() == 0 and mb.loss_mask.view(4, 512)[:, 64:].all()


def test_a_cpu_run_writes_a_row_per_configuration_whose_parts_add_up_and_a_profile_of_each(tmp_path):
    out, profiles = tmp_path / "rows.json", tmp_path / "profiles"
    done = subprocess.run(
        [sys.executable, str(BENCH), "--shape", "tiny", "--models_dir", str(tmp_path), "--seq_lens", "128,512",
         "--micro_batch_tokens", "256,512", "--tokens_per_step", "1024", "--steps", "2", "--json", str(out), "--profile", str(profiles)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    rows = json.loads(out.read_text())
    # 512-token samples do not fit a 256-token budget: that pair is left out
    assert [(r["seq_len"], r["micro_batch_tokens"]) for r in rows] == [(128, 256), (128, 512), (512, 512)]
    for r in rows:
        assert r["device"] == "cpu" and r["mfu"] is None and r["publish"] == "background"
        assert r["tokens"] == 1024 and r["tokens_per_s"] > 0
        parts = r["forward_s"] + r["backward_s"] + r["optimizer_s"] + r["publish_s"]
        assert 0 < parts <= r["step_s"] and 0 <= r["publish_share"] < 1
    # one more, untimed step of each configuration, its operators by self time
    for seq_len, mbt in [(128, 256), (128, 512), (512, 512)]:
        table = (profiles / f"profile_{seq_len}_{mbt}.txt").read_text()
        assert "Self CPU" in table and "aten::mm" in table
