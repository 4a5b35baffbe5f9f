"""Build a tiny random-init Qwen2 causal LM with a locally trained tokenizer, in HF format.

Nothing is downloaded: the tokenizer is a byte-level BPE trained with ``tokenizers`` on text
generated here, the model is ``Qwen2ForCausalLM`` with random weights, both saved with
``save_pretrained`` (safetensors). The same seed gives byte-identical weights and tokenizer.

Trap handled here: transformers 5 rebuilds the pre-tokenizer of ``model_type=qwen2`` tokenizers
from Qwen2's split regex. The tokenizer is therefore trained with exactly that pre-tokenizer
(split regex + byte-level, NFC normaliser), so ``tokenizers``, transformers and vLLM produce
identical ids (checked in the tests).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

# Qwen2's pre-tokenizer split pattern (the one transformers 5 installs for qwen2 tokenizers).
QWEN2_SPLIT_PATTERN = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
ENDOFTEXT = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
SPECIAL_TOKENS = [ENDOFTEXT, IM_START, IM_END]

CHATML_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

_WORDS = [
    "the",
    "a",
    "an",
    "of",
    "to",
    "in",
    "is",
    "was",
    "for",
    "on",
    "that",
    "with",
    "as",
    "by",
    "at",
    "from",
    "it",
    "this",
    "be",
    "are",
    "or",
    "which",
    "one",
    "answer",
    "question",
    "number",
    "sum",
    "add",
    "plus",
    "minus",
    "times",
    "equals",
    "result",
    "reward",
    "model",
    "train",
    "step",
    "policy",
    "token",
    "letter",
    "word",
    "count",
    "reverse",
    "sort",
    "list",
    "first",
    "last",
    "even",
    "odd",
    "yes",
    "no",
    "true",
    "false",
    "hello",
    "world",
    "tiny",
    "test",
    "value",
    "what",
    "how",
    "many",
    "where",
    "when",
    "why",
    "who",
    "think",
    "solve",
    "compute",
    "check",
    "alpha",
    "beta",
    "gamma",
    "delta",
    "red",
    "green",
    "blue",
    "cat",
    "dog",
    "bird",
    "tree",
    "river",
    "stone",
    "light",
    "dark",
    "fast",
    "slow",
]


@dataclass(frozen=True)
class TinyModelSpec:
    """Shape of the tiny model. Defaults: ~0.9M parameters, 2 layers, head_dim 32."""

    vocab_size: int = 2048
    hidden_size: int = 128
    intermediate_size: int = 256
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    head_dim: int = 32
    max_position_embeddings: int = 2048
    tie_word_embeddings: bool = False
    seed: int = 0
    dtype: str = "float32"
    """dtype of the saved weights (float32 or bfloat16)."""


# Bigger random models for benchmarks: "small" (~21M params) decodes at a GPU-like per-stream rate
# on a CPU; "medium" (~126M params, 503 MB fp32) sizes the reload and checkpoint benchmarks.
PRESETS = {
    "tiny": TinyModelSpec(),
    "small": TinyModelSpec(
        hidden_size=512,
        intermediate_size=1536,
        num_hidden_layers=8,
        num_attention_heads=8,
        num_key_value_heads=4,
        head_dim=64,
    ),
    "medium": TinyModelSpec(
        vocab_size=8192,
        hidden_size=768,
        intermediate_size=3072,
        num_hidden_layers=12,
        num_attention_heads=12,
        num_key_value_heads=12,
        head_dim=64,
    ),
    # the shapes of real models (random weights), for the trainer's GPU benchmark
    "qwen2.5-0.5b": TinyModelSpec(
        vocab_size=151936,
        hidden_size=896,
        intermediate_size=4864,
        num_hidden_layers=24,
        num_attention_heads=14,
        num_key_value_heads=2,
        head_dim=64,
        max_position_embeddings=32768,
        tie_word_embeddings=True,
        dtype="bfloat16",
    ),
    "qwen2.5-1.5b": TinyModelSpec(
        vocab_size=151936,
        hidden_size=1536,
        intermediate_size=8960,
        num_hidden_layers=28,
        num_attention_heads=12,
        num_key_value_heads=2,
        head_dim=128,
        max_position_embeddings=32768,
        tie_word_embeddings=True,
        dtype="bfloat16",
    ),
}


def generate_corpus(seed: int, lines: int = 4000) -> list[str]:
    """Deterministic training text: words, arithmetic, digits, punctuation and chat-like lines."""
    rng = random.Random(seed)
    out = []
    for i in range(lines):
        kind = i % 4
        if kind == 0:
            out.append(" ".join(rng.choice(_WORDS) for _ in range(rng.randint(3, 14))) + rng.choice(".?!"))
        elif kind == 1:
            a, b = rng.randint(0, 999), rng.randint(0, 999)
            out.append(f"What is {a} + {b}? The answer is {a + b}.")
        elif kind == 2:
            word = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 8)))
            out.append(f"Reverse '{word}': {word[::-1]}\n")
        else:
            out.append(
                f"user: {rng.choice(_WORDS)} {rng.randint(0, 99)}\nassistant: {rng.choice(_WORDS)} (ok) [{i}]"
            )
    return out


def train_tokenizer(vocab_size: int, seed: int):
    """Train a byte-level BPE tokenizer with Qwen2's pre-tokenizer on the generated corpus."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token=None, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_SPLIT_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(generate_corpus(seed), trainer=trainer)
    return tok


def build_tiny_model(output_dir: Path, spec: TinyModelSpec | None = None, overwrite: bool = False) -> Path:
    """Write the tiny model (config, weights, tokenizer, chat template) to ``output_dir``.

    Returns the directory. An existing complete model directory is kept unless ``overwrite``.
    """
    import torch
    from transformers import GenerationConfig, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    spec = spec or TinyModelSpec()
    output_dir = Path(output_dir)
    marker = output_dir / "tiny_model_spec.json"
    spec_json = json.dumps(spec.__dict__, sort_keys=True)
    if marker.is_file() and not overwrite and marker.read_text() == spec_json:
        return output_dir
    output_dir.mkdir(parents=True, exist_ok=True)

    raw = train_tokenizer(spec.vocab_size, spec.seed)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=raw,
        bos_token=None,
        eos_token=IM_END,
        pad_token=ENDOFTEXT,
        unk_token=None,
        additional_special_tokens=[IM_START, IM_END],
        model_max_length=spec.max_position_embeddings,
        clean_up_tokenization_spaces=False,
    )
    tokenizer.chat_template = CHATML_TEMPLATE
    im_end_id = raw.token_to_id(IM_END)
    eot_id = raw.token_to_id(ENDOFTEXT)

    config = Qwen2Config(
        vocab_size=spec.vocab_size,
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_hidden_layers,
        num_attention_heads=spec.num_attention_heads,
        num_key_value_heads=spec.num_key_value_heads,
        head_dim=spec.head_dim,
        max_position_embeddings=spec.max_position_embeddings,
        tie_word_embeddings=spec.tie_word_embeddings,
        bos_token_id=eot_id,
        eos_token_id=im_end_id,
        pad_token_id=eot_id,
        torch_dtype=spec.dtype,
        use_sliding_window=False,
    )
    torch.manual_seed(spec.seed)
    # A larger init std than the default 0.02 makes the random model's next-token
    # distribution far from uniform, so greedy output depends visibly on the weights.
    config.initializer_range = 0.1
    model = Qwen2ForCausalLM(config).to(getattr(torch, spec.dtype))
    model.generation_config = GenerationConfig(
        bos_token_id=eot_id, eos_token_id=[im_end_id, eot_id], pad_token_id=eot_id, do_sample=False
    )
    model.save_pretrained(output_dir, safe_serialization=True)
    tokenizer.save_pretrained(output_dir)
    marker.write_text(spec_json)
    return output_dir
