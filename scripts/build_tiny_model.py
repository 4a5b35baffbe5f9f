"""Build the tiny random-init Qwen2 model (HF format, locally trained tokenizer).

usage: python scripts/build_tiny_model.py [--output models/tiny] [--seed 0] [--overwrite]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from prime_rl.dev.tiny_model import TinyModelSpec, build_tiny_model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=Path("models/tiny"), help="model directory to write")
    parser.add_argument("--seed", type=int, default=0, help="seed of weights and tokenizer corpus")
    parser.add_argument(
        "--tie-word-embeddings", action="store_true", help="share input and output embeddings"
    )
    parser.add_argument("--overwrite", action="store_true", help="rebuild even if the directory is complete")
    args = parser.parse_args()
    spec = TinyModelSpec(seed=args.seed, tie_word_embeddings=args.tie_word_embeddings)
    path = build_tiny_model(args.output, spec, overwrite=args.overwrite)
    print(f"tiny model ready in {path}")


if __name__ == "__main__":
    main()
