"""The package's shape, enforced as tests/test_engines.py enforces the engine rule: the import
graph of harness/ (every import, also those inside functions) has no cycle, only the pytest
entry points import pytest, and only the config package (plus the Hydra app a launcher runs)
imports Hydra."""

from __future__ import annotations

import ast
from pathlib import Path

HARNESS = Path(__file__).resolve().parents[1] / "harness"
PYTEST_ENTRY_POINTS = {"harness.plugin", "harness.cli"}  # the plugin, and the CLI that calls pytest.main
HYDRA_MODULES = ("harness.config.", "harness.sweep.app")  # compose; the Hydra app a launcher runs (@hydra.main)


def module_name(path: Path) -> str:
    parts = path.relative_to(HARNESS.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, ast.Module]:
    return {module_name(p): ast.parse(p.read_text(), str(p)) for p in sorted(HARNESS.rglob("*.py"))}


def imported_names(tree: ast.Module) -> set[str]:
    """Every module an import statement names, anywhere in the file (deferred imports too);
    `from a import b` names a.b as well, in case b is a module."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def import_graph() -> dict[str, set[str]]:
    trees = modules()
    return {name: {m for m in imported_names(tree) if m in trees and m != name} for name, tree in trees.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component with more than one module (Tarjan)."""
    index, low, stack, on_stack, found, counter = {}, {}, [], set(), [], [0]

    def visit(node: str) -> None:
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_cycle_even_counting_imports_inside_functions():
    assert cycles(import_graph()) == []


def test_the_cycle_finder_finds_a_deferred_cycle():
    # what the rule guards against, the way it once happened: plugin -> sweep (deferred) -> plugin
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]


def test_only_the_pytest_entry_points_import_pytest():
    users = {name for name, tree in modules().items()
             if any(m == "pytest" or m.startswith(("pytest.", "_pytest")) for m in imported_names(tree))}
    assert users <= PYTEST_ENTRY_POINTS, f"pytest imported outside the entry points: {sorted(users - PYTEST_ENTRY_POINTS)}"


def test_only_the_config_package_imports_hydra():
    users = {name for name, tree in modules().items()
             if any(m == "hydra" or m.startswith("hydra.") for m in imported_names(tree))}
    stray = {u for u in users if not (u.startswith(HYDRA_MODULES[0]) or u in HYDRA_MODULES[1:])}
    assert not stray, f"Hydra imported outside harness/config (and the sweep's Hydra app): {sorted(stray)}"


def test_no_private_hydra_api():
    private = {name for name, tree in modules().items()
               if any(m.startswith("hydra._internal") for m in imported_names(tree))}
    assert not private, f"Hydra's private modules used by {sorted(private)}"


def test_every_package_says_what_lives_there_and_what_it_may_import():
    for init in sorted(HARNESS.glob("*/__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        assert doc, f"{init.relative_to(HARNESS.parent)} has no docstring"
        if init.parent.name not in {"sim"}:  # the simulator is a program of its own (python -m harness.sim)
            assert "May import" in doc or "may import" in doc, f"{init.relative_to(HARNESS.parent)} does not say what it may import"


def test_the_architecture_page_names_every_record_kind_and_command_the_code_has():
    """The page's lists are checked against the code: a new record kind or command that the
    map does not name fails here (it once said four kinds and ten commands for five and 13)."""
    import re

    from harness.record.kinds import KINDS

    page = (HARNESS.parent / "docs" / "architecture.md").read_text(encoding="utf-8")
    kinds_line = next(line for line in page.splitlines() if line.startswith("harness/record/recorder.py"))
    listed_kinds = set(re.search(r"kinds ([\w |]+) \(", kinds_line).group(1).replace(" ", "").split("|"))
    assert listed_kinds == set(KINDS), listed_kinds ^ set(KINDS)
    assert f"the {['', 'one', 'two', 'three', 'four', 'five', 'six', 'seven'][len(KINDS)]} kinds" in page
    cli = ast.parse((HARNESS / "cli.py").read_text(encoding="utf-8"))
    commands = {node.args[0].value for node in ast.walk(cli) if isinstance(node, ast.Call)
                and getattr(node.func, "attr", "") == "add_parser" and node.args and isinstance(node.args[0], ast.Constant)}
    cli_line = next(line for line in page.splitlines() if line.startswith("harness/cli.py"))
    listed = set(re.search(r"`specgate ([\w |]+)`", cli_line).group(1).replace(" ", "").split("|"))
    assert commands and listed == commands, listed ^ commands
