"""Offline rollout collection: ``collect-rollouts`` (JSONL tasks in, scored JSONL samples out)."""
