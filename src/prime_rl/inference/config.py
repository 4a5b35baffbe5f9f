"""Configuration of the ``inference`` process (vLLM server + admin routes)."""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import ClassVar, Literal

from pydantic import Field, SecretStr, model_validator

from prime_rl.config import BaseConfig, OutputDir

_IPV4_LOOPBACK = ipaddress.ip_network("127.0.0.0/8")


def is_loopback(host: str | None) -> bool:
    """Whether binding to ``host`` keeps the server reachable from this machine only.

    Only 127.0.0.0/8, ::1 and ``localhost`` are. ``""`` and ``None`` bind every interface, like
    ``0.0.0.0`` and ``::``; any other name may resolve to anything, so it counts as beyond.
    """
    if not host:
        return False
    if host.lower() == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    if address.version == 4:
        return address in _IPV4_LOOPBACK
    return int(address) == 1  # ::1 (a scope id aside); not IPv4-mapped forms, whatever Python says


def beyond_loopback_error(host: str | None, port: int) -> str:
    """The one-line refusal for serving beyond loopback without an admin token."""
    return (
        f"host {host!r} (port {port}) is reachable beyond loopback (only 127.0.0.0/8, ::1 and localhost "
        "are not): set --admin_token (or env PRIME_ADMIN_TOKEN) so that nobody else can swap the served weights"
    )


class InferenceConfig(BaseConfig):
    """vLLM's OpenAI-compatible server plus the admin routes /update_weights and /reload_weights.

    Unknown flags are passed to vLLM's own argument parser (e.g. --enable-prefix-caching),
    which rejects what it does not know.
    """

    process: ClassVar[str] = "inference"
    passthrough_unknown_flags: ClassVar[bool] = True

    model: str = Field(min_length=1)
    """HF model directory or hub name to serve (the base weights that /reload_weights restores)."""

    served_model_name: str | None = None
    """Name clients use in the `model` field of requests (default: the value of --model)."""

    host: str = "127.0.0.1"
    """Interface to bind. Anything but 127.0.0.0/8, ::1 and localhost ('' and 0.0.0.0 included)
    requires --admin_token; checked on what vLLM binds, --host passed through to vLLM included."""

    port: int = Field(default=8000, ge=0, le=65535)
    """TCP port of the HTTP server (0 is not allowed by vLLM; pick a free port)."""

    output_dir: OutputDir = Path("outputs")
    """Run directory: logs go to <output_dir>/logs/inference.log, the resolved config to configs/."""

    weights_root: Path | None = None
    """Directory that every /update_weights `weight_dir` must resolve inside (symlinks included).
    Default: <output_dir>/weights."""

    admin_token: SecretStr | None = None
    """Bearer token required on admin routes (env PRIME_ADMIN_TOKEN). Mandatory beyond loopback."""

    tensor_parallel_size: int = Field(default=1, ge=1)
    """Tensor-parallel degree (GPUs per server)."""

    gpu_memory_utilization: float = Field(default=0.9, gt=0.0, le=1.0)
    """Fraction of GPU memory vLLM may use (ignored on CPU)."""

    max_model_len: int | None = Field(default=None, ge=1)
    """Maximum context length (prompt + completion); default: the model's."""

    max_num_batched_tokens: int | None = Field(default=None, ge=1)
    """Token budget of one engine step."""

    max_num_seqs: int | None = Field(default=None, ge=1)
    """Maximum number of sequences scheduled together."""

    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    """Weight/activation dtype. 'auto' picks float32 on CPU (AVX2 has no native bf16), else the model's."""

    enforce_eager: bool = False
    """Disable graph capture/compilation (starts much faster; slower steady state on GPU)."""

    seed: int = 0
    """Engine seed for sampling."""

    kv_cache_memory_bytes: int | None = Field(default=None, ge=1)
    """KV cache size in bytes (small values for tests); default: vLLM's own sizing."""

    logprobs_mode: Literal["processed_logprobs", "raw_logprobs"] = "processed_logprobs"
    """Which logprobs the API returns. processed: after temperature (what the trainer recomputes
    from logits / temperature, so its ratio to the inference logprobs is exact); raw: vLLM's
    default, before temperature."""

    inflight_on_update: Literal["keep", "abort", "wait"] = "keep"
    """What happens to requests in flight during a weight swap. keep: they are frozen, their KV
    cache is dropped, and they resume under the new weights (tokens before the swap came from the
    old weights); abort: they end with finish_reason 'abort'; wait: the swap waits until they finish
    (new requests queue meanwhile)."""

    weight_reload: Literal["auto", "direct", "layerwise"] = "auto"
    """How a weight update reaches the running model. direct: every tensor is copied into the
    parameter that serves it (the model's own ``load_weights``, in place): one pass over the bytes,
    no re-materialisation. On the CPU backend the linear layers then compute with oneDNN on their
    plain weights instead of a prepacked copy, which would have to be repacked on every update
    (several times the cost of reading the bytes): swaps about 3x faster, decoding about 0.7x as
    fast (benchmarks/RESULTS.md). On a GPU nothing is repacked either way. layerwise: vLLM's
    layerwise reload, which re-materialises each layer and runs its post-load processing
    (repacking on the CPU backend); needed by models whose layers transform their weights after
    loading (quantised, MLA). auto: direct, except layerwise for such models (as is direct when
    set explicitly on one, with a warning)."""

    max_update_bytes: int = Field(default=1 << 40, ge=1)
    """Refuse a weight dir whose safetensors files add up to more than this."""

    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    """Log level of the console and of logs/inference.log."""

    tool_call_parser: str | None = None
    """vLLM's tool-call parser for the model's chat format, for chat requests that carry ``tools``
    with ``tool_choice`` auto (``collect-rollouts`` on tool tasks): turns the model's text into
    ``tool_calls`` (``--enable-auto-tool-choice --tool-call-parser NAME``). ``hermes``: Qwen2.5,
    Qwen3, Hermes 2/3 (``<tool_call>{json}</tool_call>``); ``llama3_json``: Llama 3.1/3.2/3.3;
    ``mistral``: Mistral/Mixtral instruct; ``pythonic``: Llama 4; ``granite``, ``internlm``,
    ``jamba``, ``deepseek_v3``, ``kimi_k2``, ``qwen3_coder``: those families (vLLM's docs list
    them all). None: requests with tool_choice auto are refused by vLLM. The orchestrator does
    not need it: it reads tool calls from the sampled text itself (``episode.tool_parser``)."""

    vllm_args: list[str] = []
    """Extra vLLM command-line arguments, passed through unchanged (also: unknown flags)."""

    @model_validator(mode="after")
    def _check(self) -> InferenceConfig:
        if not is_loopback(self.host) and self.admin_token is None:
            raise ValueError(beyond_loopback_error(self.host, self.port))
        if self.admin_token is not None and not self.admin_token.get_secret_value().strip():
            raise ValueError("admin_token is empty")
        return self

    @property
    def resolved_weights_root(self) -> Path:
        return (self.weights_root or self.output_dir / "weights").expanduser()
