"""The import graph of src/prime_rl: process packages never import each other, no cycles.

The contracts between processes live in packages that no process owns (``transport/``,
``clients/``, ``envs/`` and the shared modules), so each process can be changed, tested and
deployed on its own (docs/design.md, "Layout"). The graph is read with ``ast`` from the sources,
every ``import`` statement counted, also those inside functions.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
PACKAGE = "prime_rl"

SHARED = {"config", "paths", "logging", "tracing", "lifecycle", "failpoints", "monitor"}
PROCESSES = {"inference", "trainer", "orchestrator"}

# what each top-level unit of prime_rl may import (besides itself); anything else is a violation
ALLOWED: dict[str, set[str]] = {
    "config": {"paths"},
    "paths": set(),
    "tracing": set(),
    "lifecycle": set(),
    "failpoints": set(),  # named kill points for the fault suite (tests/faults/)  # process groups and parent death: the launcher and every child entry point
    "logging": {"tracing"},
    "monitor": {"config", "paths"},  # metrics.jsonl, W&B, TensorBoard: the trainer and the orchestrator
    "transport": SHARED,
    "clients": SHARED,
    "envs": SHARED,
    "inference": SHARED | {"transport"},
    "trainer": SHARED | {"transport"},
    "orchestrator": SHARED | {"transport", "clients", "envs"},
    "collect": SHARED | {"clients", "envs"},
    "analysis": SHARED,
    "dev": SHARED | {"transport"},
    # the launcher builds the three processes' configs and starts them: the one place that knows all three
    # (and collect's, for the configuration reference docs/config.md)
    "launcher": SHARED | PROCESSES | {"transport", "clients", "envs", "collect"},
}


def module_name(path: Path) -> str:
    rel = path.relative_to(SRC).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path) -> set[str]:
    """Every prime_rl module ``path`` imports (absolute and relative, at any depth)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    here = module_name(path).split(".")
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here if is_package else here[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            found.add(target)
            # `from prime_rl.trainer import ckpt` imports the module prime_rl.trainer.ckpt
            found.update(f"{target}.{alias.name}" for alias in node.names)
    return {name for name in found if name == PACKAGE or name.startswith(PACKAGE + ".")}


def graph() -> dict[str, set[str]]:
    files = {module_name(p): p for p in (SRC / PACKAGE).rglob("*.py")}
    out: dict[str, set[str]] = {}
    for name, path in files.items():
        # keep only names that are modules or packages of ours (drop `prime_rl.x.SomeClass`)
        out[name] = {m for m in imports_of(path) if m in files and m != name}
    return out


def unit(module: str) -> str:
    """The top-level unit of a module: ``prime_rl.clients.admin`` -> ``clients``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_the_graph_is_read():
    g = graph()
    assert "prime_rl.orchestrator.loop" in g
    assert "prime_rl.transport.rollouts" in g["prime_rl.orchestrator.batch"]  # sanity: edges are found


def test_every_unit_has_a_rule():
    units = {unit(m) for m in graph()} - {""}
    assert units <= set(ALLOWED), f"top-level units without an import rule: {sorted(units - set(ALLOWED))}"


@pytest.mark.parametrize("source_unit", sorted(ALLOWED))
def test_units_import_only_what_they_may(source_unit):
    bad = sorted(
        f"{src} imports {dst}"
        for src, targets in graph().items()
        if unit(src) == source_unit
        for dst in targets
        if unit(dst) not in ALLOWED[source_unit] | {source_unit, ""}
    )
    assert not bad, "\n".join(bad)


def test_no_process_imports_another_process():
    bad = sorted(
        f"{src} imports {dst}"
        for src, targets in graph().items()
        for dst in targets
        if unit(src) in PROCESSES and unit(dst) in PROCESSES and unit(src) != unit(dst)
    )
    assert not bad, "\n".join(bad)


def test_nothing_imports_the_launcher_or_dev_helpers():
    bad = sorted(
        f"{src} imports {dst}"
        for src, targets in graph().items()
        for dst in targets
        if unit(dst) in {"launcher", "dev"} and unit(src) != unit(dst)
    )
    assert not bad, "\n".join(bad)


def find_cycle(g: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``g`` (a list of modules, first == last), or None."""
    state: dict[str, int] = {}  # 1 = on the stack, 2 = done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(g.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(g):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_find_cycle_finds_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_cycles_between_modules():
    g = graph()
    # a package's __init__ importing its own submodules is how packages work, not a cycle to report
    edges = {m: {d for d in targets if not m.startswith(d + ".")} for m, targets in g.items()}
    cycle = find_cycle(edges)
    assert cycle is None, " -> ".join(cycle or [])


def test_no_import_cycles_between_units():
    edges: dict[str, set[str]] = {}
    for src, targets in graph().items():
        for dst in targets:
            if unit(src) != unit(dst) and unit(src) and unit(dst):
                edges.setdefault(unit(src), set()).add(unit(dst))
    cycle = find_cycle(edges)
    assert cycle is None, " -> ".join(cycle or [])


@pytest.mark.parametrize("module", ["prime_rl.launcher.main", "prime_rl.analysis.__main__"])
def test_the_launcher_and_the_analyzer_start_without_torch(module):
    """`rl` (its --help, its config checks, its watchdog) and the analyzer never run a tensor:
    importing torch would cost every start 1.5-2 s on this machine (rl --help: 2.1 s with it,
    0.5 s without)."""
    code = f"import sys, {module}; print(sorted(m for m in ('torch', 'vllm') if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"
