"""The layout keeps its architecture (docs/architecture.md): the import graph of app/ and workers/
has no circles, the ML core imports no web, database or Celery code, and every import runs down
the layers except the few arrows by which a composition root reaches its parts, named below.

The graph is read from the source with ``ast`` (imports inside functions and under
TYPE_CHECKING count too), so nothing is imported to check it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("app", "workers")

# Bottom to top. A module may import its own layer and the layers below it.
LAYERS = (
    "ml core",
    "foundations",
    "infrastructure",
    "runtime",
    "http kit",
    "domains",
    "pages",
    "entry points",
)

INFRASTRUCTURE = {
    "app.jobs.stages",
    "app.jobs.dispatch",
    "app.jobs.service",
    "app.index.registry",
    "app.index.engine",
    "app.index.pgvector",
}
DOMAINS = (
    "app.auth",
    "app.spec_spaces",
    "app.learnwares",
    "app.tasks",
    "app.reuse",
    "app.jobs",
    "app.index",
    "app.health",
)
# The pages people use: the market's web pages and the admin dashboard (which shares their
# sign-in), on top of the domains' services.
PAGES = ("app.web", "app.admin")
ENTRY_POINTS = ("app.main", "app.client", "app.cli", "app.bench", "workers")

# The only arrows that run back up: the runtime, a composition root below the domains that use
# it, builds a process's parts, and two of them live above it.
UPWARD_ARROWS = {
    ("app.runtime", "app.spec_spaces.service"): "the default space's id (config + base weights)",
    ("app.runtime", "workers.celery_app"): "make_celery: the Celery app is made by workers/ alone",
}

# Third-party packages of the service side: the ML core imports none of them.
SERVICE_LIBRARIES = {
    "alembic",
    "boto3",
    "botocore",
    "celery",
    "fastapi",
    "flower",
    "httpx",
    "kombu",
    "prometheus_client",
    "pydantic_settings",
    "redis",
    "rich",
    "sqlalchemy",
    "starlette",
    "typer",
    "uvicorn",
}


def _within(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def layer_of(module: str) -> int:
    """The layer a module of app/ or workers/ belongs to (an index into LAYERS)."""
    if _within(module, ("app.ml",)):
        return 0
    if module in ("app", "app.errors", "app.settings", "app.children"):
        return 1
    if _within(module, ("app.db", "app.storage")) or module in INFRASTRUCTURE:
        return 2
    if module == "app.runtime":
        return 3
    if _within(module, ("app.api",)):
        return 4
    if _within(module, DOMAINS):
        return 5
    if _within(module, PAGES):
        return 6
    if _within(module, ENTRY_POINTS):
        return 7
    raise AssertionError(f"{module} is in no layer: add it to tests/test_architecture.py and the doc")


def modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


def _imported_names(module: str, path: Path) -> Iterator[tuple[str, str | None]]:
    """(module named by an import, the name imported from it or None) for every import."""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, None
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package[: len(package) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                yield base, alias.name


def import_graph() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """Arrows between the modules of app/ and workers/, and the top-level third-party packages
    each module imports."""
    known = modules()

    def resolve(name: str) -> str | None:
        while name and name not in known:
            name = name.rpartition(".")[0]
        return name or None

    arrows: dict[str, set[str]] = {}
    external: dict[str, set[str]] = {}
    for module, path in known.items():
        targets: set[str] = set()
        libraries: set[str] = set()
        for base, name in _imported_names(module, path):
            if base.split(".")[0] not in PACKAGES:
                libraries.add(base.split(".")[0])
                continue
            full = f"{base}.{name}" if name else base
            target = resolve(full if full in known else base)
            if target is not None and target != module:
                targets.add(target)
        arrows[module] = targets
        external[module] = libraries
    return arrows, external


def circles(arrows: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(arrows[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
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

    for node in sorted(arrows):
        if node not in index:
            visit(node)
    return found


@pytest.fixture(scope="module")
def graph() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    return import_graph()


def test_the_graph_is_read_from_the_whole_tree(
    graph: tuple[dict[str, set[str]], dict[str, set[str]]],
) -> None:
    arrows, _ = graph
    assert {"app.main", "app.runtime", "app.ml.pave", "workers.tasks"} <= set(arrows)
    assert "app.runtime" in arrows["app.main"]
    assert "app.ml.errors" in arrows["app.errors"]  # a from-import of a module's name


def test_there_are_no_import_circles(graph: tuple[dict[str, set[str]], dict[str, set[str]]]) -> None:
    arrows, _ = graph
    assert circles(arrows) == []


def test_circles_are_found() -> None:
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_ml_core_imports_no_web_database_or_celery_code(
    graph: tuple[dict[str, set[str]], dict[str, set[str]]],
) -> None:
    arrows, external = graph
    core = [m for m in arrows if _within(m, ("app.ml",))]
    assert core
    outside = {m: sorted(t for t in arrows[m] if not _within(t, ("app.ml",))) for m in core}
    assert {m: t for m, t in outside.items() if t} == {}
    service = {m: sorted(external[m] & SERVICE_LIBRARIES) for m in core}
    assert {m: libs for m, libs in service.items() if libs} == {}


def test_every_module_has_a_layer(graph: tuple[dict[str, set[str]], dict[str, set[str]]]) -> None:
    arrows, _ = graph
    for module in arrows:
        layer_of(module)


def test_arrows_run_down_the_layers_but_the_named_ones(
    graph: tuple[dict[str, set[str]], dict[str, set[str]]],
) -> None:
    arrows, _ = graph
    upward = {
        (source, target): f"{LAYERS[layer_of(source)]} -> {LAYERS[layer_of(target)]}"
        for source, targets in arrows.items()
        for target in targets
        if layer_of(target) > layer_of(source)
    }
    assert {arrow: why for arrow, why in upward.items() if arrow not in UPWARD_ARROWS} == {}
    # The named arrows still exist (the list stays true as the code changes).
    assert set(UPWARD_ARROWS) <= set(upward)


def defined_names(path: Path) -> set[str]:
    """The names a module defines at its top level (classes, functions, assignments, also under
    ``if``/``try``) and those its ``__all__`` lists (a package's deliberate re-exports)."""
    names: set[str] = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        for inner in ast.walk(node) if isinstance(node, ast.If | ast.Try) else (node,):
            if isinstance(inner, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(inner.name)
            elif isinstance(inner, ast.AnnAssign) and isinstance(inner.target, ast.Name):
                names.add(inner.target.id)
            elif isinstance(inner, ast.Assign):
                for target in inner.targets:
                    if isinstance(target, ast.Name):
                        names.add(target.id)
                        if target.id == "__all__" and isinstance(inner.value, ast.List | ast.Tuple):
                            names |= {e.value for e in inner.value.elts if isinstance(e, ast.Constant)}
    return names


def test_names_are_imported_from_their_home() -> None:
    """A name comes from the module that defines it (or lists it in ``__all__``), not through
    another module that happens to import it: ``Forbidden`` from ``app.errors``, not from
    ``app.api.errors``; ``Progress`` from ``app.ml.progress``."""
    known = modules()
    defined = {module: defined_names(path) for module, path in known.items()}
    borrowed = sorted(
        f"{module} imports {name} from {base}"
        for module, path in known.items()
        for base, name in _imported_names(module, path)
        if name and base in known and f"{base}.{name}" not in known and name not in defined[base]
    )
    assert borrowed == []


def test_a_borrowed_name_is_found(tmp_path: Path) -> None:
    home = tmp_path / "home.py"
    home.write_text(
        "from elsewhere import Thing\n__all__ = ['Listed']\nfrom x import Listed\nclass Own: ...\n"
    )
    assert defined_names(home) == {"__all__", "Listed", "Own"}


# PAVEDOCK_URL is the client's: read before (and whatever) the service's settings, so a bad
# server setting in the same environment does not stop a client command.
ENVIRONMENT_READS = {("app.cli.where", "PAVEDOCK_URL")}


def environment_reads(path: Path) -> Iterator[str]:
    """The ``PAVEDOCK_*`` variables a module reads with ``os.environ`` / ``os.getenv``."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        key: ast.expr | None = None
        if isinstance(node, ast.Call) and node.args:
            func = node.func
            if (isinstance(func, ast.Attribute) and func.attr == "getenv") or (
                isinstance(func, ast.Attribute)
                and func.attr == "get"
                and isinstance(func.value, ast.Attribute)
                and func.value.attr == "environ"
            ):
                key = node.args[0]
        elif (
            isinstance(node, ast.Subscript)
            and isinstance(node.ctx, ast.Load)
            and isinstance(node.value, ast.Attribute)
            and node.value.attr == "environ"
        ):
            key = node.slice
        if isinstance(key, ast.Constant) and str(key.value).startswith("PAVEDOCK_"):
            yield str(key.value)


def test_settings_are_read_only_through_settings() -> None:
    """One ``Settings`` (app/settings.py) reads the ``PAVEDOCK_*`` environment: no second settings
    class, no ``os.environ`` read of a dock variable elsewhere (the ML core is handed what it needs)."""
    settings_classes = []
    reads = set()
    for module, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and any(
                (isinstance(b, ast.Name) and b.id == "BaseSettings")
                or (isinstance(b, ast.Attribute) and b.attr == "BaseSettings")
                for b in node.bases
            ):
                settings_classes.append(f"{module}.{node.name}")
        reads |= {(module, name) for name in environment_reads(path)}
    assert settings_classes == ["app.settings.Settings"]
    assert reads - ENVIRONMENT_READS == set()
    assert reads >= ENVIRONMENT_READS  # the exception is still needed


def test_environment_reads_are_found(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text(
        "import os\nos.environ.get('PAVEDOCK_A')\nos.getenv('PAVEDOCK_B', '')\nos.environ['PAVEDOCK_C']\n"
        "os.environ['PAVEDOCK_D'] = '1'\nos.environ.get('HOME')\n"
    )
    assert sorted(environment_reads(source)) == ["PAVEDOCK_A", "PAVEDOCK_B", "PAVEDOCK_C"]
