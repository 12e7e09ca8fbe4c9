"""The engine's import graph has no cycle, and every package imports only the layers below it (``LAYERS``),
counting every import: module level, function-local and ``TYPE_CHECKING`` ones alike (parsed from the source,
nothing imported)."""
import ast
import os

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENGINE = os.path.join(REPO, "engine")


def engine_imports() -> dict[str, set[str]]:
    """engine module name -> the engine modules it imports anywhere in its source."""
    modules = {f[:-3] for f in os.listdir(ENGINE) if f.endswith(".py") and f != "__init__.py"}
    graph = {}
    for name in modules:
        with open(os.path.join(ENGINE, name + ".py")) as f:
            tree = ast.parse(f.read())
        deps = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                deps |= {a.name.split(".")[1] for a in node.names if a.name.startswith("engine.")}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                if node.module == "engine":
                    deps |= {a.name for a in node.names if a.name in modules}
                elif node.module.startswith("engine."):
                    deps.add(node.module.split(".")[1])
        graph[name] = deps & modules - {name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str]:
    """One cycle as [a, b, ..., a], or [] when the graph is acyclic."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n):
        state[n] = 1
        stack.append(n)
        for m in sorted(graph[n]):
            if state.get(m) == 1:
                return stack[stack.index(m):] + [m]
            if m not in state:
                found = visit(m)
                if found:
                    return found
        stack.pop()
        state[n] = 2
        return []

    for n in sorted(graph):
        if n not in state:
            found = visit(n)
            if found:
                return found
    return []


def test_find_cycle_finds_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) == []


def test_the_engine_imports_form_no_cycle():
    graph = engine_imports()
    assert {"loop", "hooks", "config", "tasks", "doctor"} <= set(graph)
    assert "loop" in graph["restore"] or "config" in graph["restore"]  # the parser sees imports at all
    cycle = find_cycle(graph)
    assert not cycle, "engine import cycle: " + " -> ".join(cycle)


# Each package and what it may import of the others (the design card's layers: each uses only those below it).
LAYERS = {
    "attention": set(),
    "models": {"attention"},
    "data": set(),
    "engine": {"attention", "models", "data"},
    "pretrained": {"attention", "models", "data", "engine"},
    "analysis": {"attention", "models", "data", "engine", "pretrained"},
    "studies": {"attention", "models", "data", "engine", "pretrained", "analysis"},
}


def package_imports() -> dict[str, dict[str, str]]:
    """package -> {other package it imports anywhere in its source: the first file that does}."""
    out: dict[str, dict[str, str]] = {}
    for package in LAYERS:
        found: dict[str, str] = {}
        for root, _, files in sorted(os.walk(os.path.join(REPO, package))):
            for name in sorted(f for f in files if f.endswith(".py")):
                path = os.path.join(root, name)
                with open(path) as f:
                    tree = ast.parse(f.read())
                for node in ast.walk(tree):
                    names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                        [node.module] if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 else []
                    for top in {n.split(".")[0] for n in names} & set(LAYERS) - {package}:
                        found.setdefault(top, os.path.relpath(path, REPO))
        out[package] = found
    return out


def test_every_package_imports_only_the_layers_below_it():
    imports = package_imports()
    assert "attention" in imports["models"] and "engine" in imports["studies"]  # the parser sees imports at all
    wrong = [f"{package} imports {other} ({where})" for package, found in imports.items()
             for other, where in sorted(found.items()) if other not in LAYERS[package]]
    assert not wrong, "; ".join(wrong)
