"""Demo: start the inference server on the tiny model, chat, swap weights in place, chat again.

Shows the answer change after /update_weights and come back after /reload_weights, with the
tagged [weights] lines of the client and the server. usage:
    python scripts/demo_weight_swap.py [--model models/tiny] [--output_dir outputs/demo]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
from pathlib import Path

from prime_rl.clients.admin import AdminClient
from prime_rl.clients.config import ClientConfig
from prime_rl.dev.server import start_server
from prime_rl.dev.weights import write_perturbed_weights
from prime_rl.logging import setup_logging
from prime_rl.tracing import parse_tagged

QUESTIONS = ["What is 2 + 3?", "Reverse 'abc'.", "Say hello."]


def ask_all(client, model: str) -> list[str]:
    answers = []
    for q in QUESTIONS:
        out = client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": q}],
            max_tokens=12,
            temperature=0.0,
            extra_body={"ignore_eos": True},
        )
        answers.append(out.choices[0].message.content)
    return answers


def show(title: str, answers: list[str]) -> None:
    print(f"\n== {title}")
    for q, a in zip(QUESTIONS, answers, strict=True):
        print(f"  {q!r:24} -> {a!r}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=Path("models/tiny"))
    parser.add_argument("--output_dir", type=Path, default=Path("outputs/demo"))
    args = parser.parse_args()
    setup_logging(None)
    if args.output_dir.exists():
        shutil.rmtree(args.output_dir)

    from openai import OpenAI

    print(f"starting the inference server on {args.model} (about 30-60 s on a CPU) ...")
    server = start_server(args.model, args.output_dir)
    try:
        server.wait_ready()
        client = OpenAI(base_url=f"{server.base_url}/v1", api_key="EMPTY")
        model = str(args.model)
        before = ask_all(client, model)
        show("base weights", before)

        weight_dir = write_perturbed_weights(
            args.model, server.weights_root / "step_1", scale=0.05, seed=1
        ).resolve()
        admin = AdminClient(ClientConfig(base_urls=[server.base_url]))

        async def swap(op):
            try:
                return await (
                    admin.update_weights(str(weight_dir)) if op == "update" else admin.reload_weights()
                )
            finally:
                await admin.aclose()

        (res,) = asyncio.run(swap("update"))
        print(
            f"\n/update_weights {weight_dir}: wall_ms={res.wall_ms:.1f} rpc_ms={res.rpc_ms:.1f} queue_ms={res.queue_ms:.1f}"
        )
        after = ask_all(client, model)
        show("after /update_weights (perturbed weights)", after)

        admin = AdminClient(ClientConfig(base_urls=[server.base_url]))
        asyncio.run(swap("reload"))
        restored = ask_all(client, model)
        show("after /reload_weights (base weights again)", restored)

        changed = sum(a != b for a, b in zip(before, after, strict=True))
        print(
            f"\n{changed}/{len(QUESTIONS)} answers changed after the swap; restored == base: {restored == before}"
        )
        print("\nserver [weights] lines (logs/inference.log):")
        for line in (args.output_dir / "logs" / "inference.log").read_text().splitlines():
            parsed = parse_tagged(line)
            if parsed and parsed.tag == "weights":
                print("  " + line.split("| ", 2)[-1])
        if changed == 0 or restored != before:
            raise SystemExit(
                "demo failed: the swap did not change the answers or reload did not restore them"
            )
    finally:
        server.stop()


if __name__ == "__main__":
    main()
