"""The package's shape, enforced as tests/test_engines.py enforces the engine rule: the import
graph of harness/ (every import, also those inside functions) has no cycle, among modules or among
packages, each package imports only what docs/architecture.md's table declares, only the pytest
entry points import pytest, only the config package (plus the Hydra app a launcher runs)
imports Hydra, and only harness/interrupts.py says what a signal does."""

from __future__ import annotations

import argparse
import ast
import functools
import itertools
import re
from pathlib import Path

HARNESS = Path(__file__).resolve().parents[1] / "harness"
PYTEST_ENTRY_POINTS = {"harness.plugin", "harness.cli"}  # the plugin, and the CLI that calls pytest.main
# compose; the Hydra app a launcher runs (@hydra.main); secrets, whose override parser masks an override's value
HYDRA_MODULES = ("harness.config.", "harness.sweep.app", "harness.secrets")
SIGNALS_MODULE = "harness.interrupts"  # the one module that sets what a signal does
# what sets (or reads, to put back) a signal's handler or mask: the signal module's functions,
# and an event loop's
SIGNAL_SETTERS = {"signal", "getsignal", "pthread_sigmask", "sigwait", "sigwaitinfo", "sigtimedwait",
                  "siginterrupt", "set_wakeup_fd"}
LOOP_SIGNAL_SETTERS = {"add_signal_handler", "remove_signal_handler"}


def module_name(path: Path) -> str:
    parts = path.relative_to(HARNESS.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, ast.Module]:
    """Every module of harness/, parsed (read-only: the tests walk the trees, never change them)."""
    return dict(parsed_modules())


@functools.cache
def parsed_modules() -> dict[str, ast.Module]:
    # parsed once per pass: a dozen tests read the same ~200 files, which do not change under them
    return {module_name(p): ast.parse(p.read_text(), str(p)) for p in sorted(HARNESS.rglob("*.py"))}


@functools.cache  # by the tree's identity: each parsed module is walked once per pass
def imported_names(tree: ast.Module) -> frozenset[str]:
    """Every module an import statement names, anywhere in the file (deferred imports too);
    `from a import b` names a.b as well, in case b is a module."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return frozenset(names)


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


def test_every_import_is_absolute():
    """The graphs read absolute imports only: a relative one would be an edge they miss."""
    relative = {name: node.lineno for name, tree in modules().items() for node in ast.walk(tree)
                if isinstance(node, ast.ImportFrom) and node.level > 0}
    assert not relative, f"relative imports (write harness.<package>...): {relative}"


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


def signal_settings(tree: ast.Module) -> list[str]:
    """Where a module sets what a signal does: a call of the signal module's handler and mask
    functions (`signal.signal`, `signal.getsignal`, ... however the module or the function
    was imported) or of an event loop's `add_signal_handler` / `remove_signal_handler`."""
    module_aliases, function_aliases = set(), {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            module_aliases.update(alias.asname or alias.name for alias in node.names if alias.name == "signal")
        elif isinstance(node, ast.ImportFrom) and node.module == "signal" and node.level == 0:
            function_aliases.update({alias.asname or alias.name: alias.name for alias in node.names
                                     if alias.name in SIGNAL_SETTERS})
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in LOOP_SIGNAL_SETTERS:
            found.append(f"line {node.lineno}: {func.attr}")
        elif isinstance(func, ast.Attribute) and func.attr in SIGNAL_SETTERS \
                and isinstance(func.value, ast.Name) and func.value.id in module_aliases:
            found.append(f"line {node.lineno}: signal.{func.attr}")
        elif isinstance(func, ast.Name) and func.id in function_aliases:
            found.append(f"line {node.lineno}: signal.{function_aliases[func.id]}")
    return sorted(found, key=lambda where: int(where.split()[1].rstrip(":")))


def test_only_the_interrupts_module_sets_what_a_signal_does():
    """Ctrl-C and SIGTERM for every driver, whatever the parent left them set to, are decided in
    one module (issue 32); the others call its functions. Sending a signal is anyone's."""
    setters = {name: found for name, tree in modules().items() if (found := signal_settings(tree))}
    assert SIGNALS_MODULE in setters, "the interrupts module sets no signal: has it moved?"
    stray = {name: found for name, found in setters.items() if name != SIGNALS_MODULE}
    assert not stray, f"signal handlers set outside {SIGNALS_MODULE} (use its functions): {stray}"


def receiver_name(func: ast.Attribute) -> str | None:
    """`x` of `x.wait(...)` or of `self.x.wait(...)`."""
    value = func.value
    return value.id if isinstance(value, ast.Name) else value.attr if isinstance(value, ast.Attribute) else None


def child_polls(tree: ast.Module) -> list[str]:
    """Where a module asks a child whether it ended (`x.poll()`) or waits on it with a timeout
    (`x.wait(timeout=...)`, `x.wait(t)`) itself. Not a child: `ray.wait`, and a name the module
    binds to an Event (`done = threading.Event()`, `self._stop = threading.Event()`)."""
    events = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) \
                and isinstance(node.value.func, ast.Attribute | ast.Name) \
                and getattr(node.value.func, "attr", getattr(node.value.func, "id", None)) == "Event":
            events.update(t.id if isinstance(t, ast.Name) else t.attr for t in node.targets
                          if isinstance(t, ast.Name | ast.Attribute))
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        name = receiver_name(node.func)
        if node.func.attr == "poll" and not node.args and not node.keywords and name != "select":
            found.append(f"line {node.lineno}: .poll()")
        elif node.func.attr == "wait" and (node.args or any(k.arg == "timeout" for k in node.keywords)) \
                and name != "ray" and name not in events:
            found.append(f"line {node.lineno}: .wait(timeout)")
    return found


def test_a_child_is_polled_and_waited_on_with_a_timeout_only_through_the_interrupts_module():
    """Popen.poll and Popen.wait(timeout) take a lock before the try that gives it back: a
    Ctrl-C between the two leaves it held and the next wait blocks for good (a sweep's Ctrl-C
    hung so). harness/interrupts.py's exit_status and wait_for_exit hold the signal over that
    step. The simulator is a program of its own, stopped by its signals, never mid-poll."""
    stray = {name: found for name, tree in modules().items()
             if name != SIGNALS_MODULE and not name.startswith("harness.sim") and (found := child_polls(tree))}
    assert not stray, f"a child polled or waited on with a timeout directly (use {SIGNALS_MODULE}): {stray}"
    assert child_polls(ast.parse("p.poll()\np.wait(timeout=1)\np.wait(3)\nevent.wait()\nasync def f():\n"
                                 "    await asyncio.wait_for(x, 1)\n")) == ["line 1: .poll()", "line 2: .wait(timeout)",
                                                                       "line 3: .wait(timeout)"]


def test_the_signal_finder_finds_every_way_of_setting_a_handler():
    tree = ast.parse("""
import signal
import signal as sig
from signal import getsignal as read, SIGINT
signal.signal(signal.SIGINT, signal.SIG_IGN)
previous = read(SIGINT)
sig.pthread_sigmask(sig.SIG_UNBLOCK, {SIGINT})
loop.add_signal_handler(SIGINT, stop)
child.send_signal(SIGINT)       # sending is not setting
os.kill(pid, signal.SIGTERM)
server.signal(SIGINT)            # not the signal module
""")
    assert signal_settings(tree) == ["line 5: signal.signal", "line 6: signal.getsignal", "line 7: signal.pthread_sigmask",
                                     "line 8: add_signal_handler"]


def test_the_modules_any_package_may_import_import_nothing_of_the_project():
    """harness/interrupts.py and harness/exit_status.py (docs/architecture.md): so that every
    package (the load, the sweep's jobs, the simulator, whose image holds the first) may use
    them without an import cycle or a layer above its own."""
    trees = modules()
    for name in (SIGNALS_MODULE, "harness.exit_status"):
        assert not {m for m in imported_names(trees[name]) if m == "harness" or m.startswith("harness.")}, name


def test_every_package_says_what_lives_there():
    """What it may import is the architecture page's table (read below), not its docstring."""
    for init in sorted(HARNESS.glob("*/__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        assert doc, f"{init.relative_to(HARNESS.parent)} has no docstring"
        assert "may import" not in doc.lower(), f"{init.relative_to(HARNESS.parent)} says what it may import: the table does"


# --------------------------------------------------------------------------- the declared layering
PAGE = HARNESS.parent / "docs" / "architecture.md"
LAYERING_HEADER = "| package | what lives there | may import |"


def node_of(module: str) -> str:
    """A module's node in the package graph: its package (harness.config), or the module itself
    when it sits at the top (harness.cli, harness.bounds); harness/__init__.py is `harness`."""
    return ".".join(module.split(".")[:2])


def package_graph(graph: dict[str, set[str]] | None = None) -> dict[str, dict[str, set[str]]]:
    """The module graph collapsed to nodes: node -> imported node -> the module imports that make the edge."""
    graph = import_graph() if graph is None else graph
    packages: dict[str, dict[str, set[str]]] = {node_of(m): {} for m in graph}
    for module, imported in graph.items():
        for other in imported:
            if node_of(other) != node_of(module):
                packages[node_of(module)].setdefault(node_of(other), set()).add(f"{module} -> {other}")
    return packages


def without_parentheses(text: str) -> str:
    while True:
        shorter = re.sub(r"\([^()]*\)", "", text)
        if shorter == text:
            return text
        text = shorter


def declared_layering(page: str) -> tuple[dict[str, set[str]], set[str]]:
    """The page's table (package -> what it may import, parenthesized reasons aside) and the
    leaves any package may import (the sentence "Any package may import ..." above it)."""
    lines = page.splitlines()
    start = lines.index(LAYERING_HEADER)
    anyone = set()
    for line in lines[:start]:
        if line.startswith("Any package may import"):
            anyone = {node_of(path.removesuffix(".py").replace("/", "."))
                      for path in re.findall(r"`(harness/\w+\.py)`", line)}
    table: dict[str, set[str]] = {}
    for row in itertools.takewhile(lambda line: line.startswith("|"), lines[start + 2:]):
        cells = [cell.strip() for cell in row.strip().strip("|").split("|")]
        where, may = cells[0].strip("`"), without_parentheses(cells[-1]).replace("`", "")
        node = "harness" if where == "harness/__init__.py" else where.rstrip("/").removesuffix(".py").replace("/", ".")
        names = [name.strip() for name in may.split(";")[0].split(",")]
        table[node] = {"harness" if name == "harness" else f"harness.{name}" for name in names if name not in ("", "nothing")}
    return table, anyone


def test_the_package_graph_has_no_cycle_even_counting_imports_inside_functions():
    packages = package_graph()
    components = cycles({node: set(edges) for node, edges in packages.items()})
    why = {f"{a} -> {b}": sorted(packages[a][b]) for component in components for a in component
           for b in packages[a] if b in component}
    assert not components, f"packages that reach each other: {components}; the edges: {why}"


def test_every_package_imports_only_what_the_architecture_page_declares():
    """The table of docs/architecture.md ("The packages") is the layering: each package's imports,
    deferred ones counted, lie within its row; the rows are harness's packages and top-level
    modules, no more, no fewer; and the declared layering itself has no cycle."""
    table, anyone = declared_layering(PAGE.read_text(encoding="utf-8"))
    packages = package_graph()
    assert set(table) | anyone == set(packages), \
        f"the page's table lists {sorted(set(table) - set(packages))} that harness lacks, and lacks {sorted(set(packages) - set(table) - anyone)}"
    unknown = {node: sorted(may - set(packages)) for node, may in table.items() if may - set(packages)}
    assert not unknown, f"the table declares imports of what harness lacks: {unknown}"
    assert cycles({node: table.get(node, set()) for node in packages}) == [], "the declared layering has a cycle"
    for leaf in anyone:
        assert not packages[leaf], f"{leaf}, which any package may import, imports {sorted(packages[leaf])}"
    stray = {f"{node} -> {other}": sorted(modules) for node, edges in packages.items() for other, modules in edges.items()
             if other not in table.get(node, set()) | anyone}
    assert not stray, f"imports outside the page's declared layering (docs/architecture.md, The packages): {stray}"


def test_the_layering_reader_reads_names_and_skips_reasons():
    page = "\n".join(["Any package may import `harness/exit_status.py`, which imports nothing.", "",
                      LAYERING_HEADER, "| --- | --- | --- |",
                      "| `harness/__init__.py` | the root | nothing |",
                      "| `harness/bounds.py` | bounds | |",
                      "| `harness/config/` | the config | harness (its folder), engines (options, flags), load; never pytest |",
                      "| `harness/cli.py` | the command | config (`compose`), run |", "", "| other | table |"])
    assert declared_layering(page) == ({"harness": set(), "harness.bounds": set(),
                                        "harness.config": {"harness", "harness.engines", "harness.load"},
                                        "harness.cli": {"harness.config", "harness.run"}}, {"harness.exit_status"})
    assert package_graph({"harness.a.x": {"harness.b.y", "harness.a.z"}, "harness.a.z": set(), "harness.b.y": set(),
                          "harness.cli": {"harness.a.x"}}) == \
        {"harness.a": {"harness.b": {"harness.a.x -> harness.b.y"}}, "harness.b": {}, "harness.cli": {"harness.a": {"harness.cli -> harness.a.x"}}}

def test_the_architecture_page_names_every_record_kind_and_command_the_code_has():
    """The page's lists are checked against the code: a new record kind or command that the
    map does not name fails here (it once said four kinds and ten commands for five and 13)."""
    from harness.record.kinds import KINDS

    page = (HARNESS.parent / "docs" / "architecture.md").read_text(encoding="utf-8")
    kinds_line = next(line for line in page.splitlines() if line.startswith("harness/record/recorder.py"))
    listed_kinds = set(re.search(r"kinds ([\w |]+) \(", kinds_line).group(1).replace(" ", "").split("|"))
    assert listed_kinds == set(KINDS), listed_kinds ^ set(KINDS)
    assert f"the {['', 'one', 'two', 'three', 'four', 'five', 'six', 'seven'][len(KINDS)]} kinds" in page
    from harness.cli import parser

    commands = set(next(a for a in parser()._actions if isinstance(a, argparse._SubParsersAction)).choices)
    cli_line = next(line for line in page.splitlines() if line.startswith("harness/cli.py"))
    listed = set(re.search(r"`specgate ([\w |]+)`", cli_line).group(1).replace(" ", "").split("|"))
    assert commands and listed == commands, listed ^ commands


def test_only_the_servers_know_docker_and_only_the_telemetry_knows_nvml():
    """The page's rules: only harness/servers/ imports the Docker SDK, only harness/telemetry/
    NVML's binding (a backend or a source is added there, and the rest never learns of it)."""
    for package, library in (("harness.servers", "docker"), ("harness.telemetry", "pynvml")):
        users = {name for name, tree in modules().items()
                 if any(m == library or m.startswith(f"{library}.") for m in imported_names(tree))}
        stray = sorted(u for u in users if not u.startswith(f"{package}."))
        assert users and not stray, f"{library} imported outside {package}: {stray}"


def every_module_paths(page: str) -> list[str]:
    """The path each line of the page's "Every module" block starts with (a list's first, its comma aside)."""
    block = page.split("## Every module", 1)[1].split("```")[1]
    return [line.split()[0].rstrip(",") for line in block.strip().splitlines()]


def test_the_every_module_map_names_each_package_and_only_paths_that_exist():
    """The map under "Every module" names every package and top-level module of harness/ (its
    folder or one of its modules), and no path that is not there (a module moved or renamed)."""
    named = every_module_paths(PAGE.read_text(encoding="utf-8"))
    gone = [path for path in named if not (HARNESS.parent / path).exists()]
    assert not gone, f"docs/architecture.md's Every module names what is not there: {gone}"
    nodes = {node.replace(".", "/") for node in package_graph() if node != "harness"}
    wanted = {f"{node}/" if (HARNESS.parent / node).is_dir() else f"{node}.py" for node in nodes}
    unnamed = sorted(w for w in wanted if not any(path.startswith(w) for path in named))
    assert not unnamed, f"docs/architecture.md's Every module does not name {unnamed}"
