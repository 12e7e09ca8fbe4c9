"""The engine's import graph has no cycle, counting every import: module level, function-local and
``TYPE_CHECKING`` ones alike (parsed from the source, nothing imported)."""
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
