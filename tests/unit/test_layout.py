"""The architecture's rules, read from the source tree:

- the packages of servebench/ form layers (LAYERS, bottom first): a module imports only from its own
  package or from a lower layer, so the house can be drawn; an upward import fails, naming it;
- no import cycle anywhere in the repository (servebench/, flows/, tasks/, warehouse/, the engine-side
  package, benchmarks/ and tests/);
- nothing under servebench/ but the CLI imports the Prefect layers (flows/, tasks/);
- no SQL in flows/ or tasks/: what they write or read of the warehouse, the library does for them;
- no engine's or provider's name outside its folder (vLLM and Ray outside servebench/engines/vllm/,
  llama.cpp outside servebench/engines/llamacpp/, ssh and Slurm outside servebench/providers/ssh|slurm/):
  no identifier and no string of servebench/, flows/ or tasks/ names one, docstrings, comments and
  field descriptions aside (prose may cite them), but for the registry lines that name them and the
  testbed, which builds sshd and a Slurm cluster on one machine and is no provider;
- engines and providers reach each other only through their interfaces: no module outside
  an engine's (provider's) folder imports from inside it, the registries aside;
- no test module imports another (shared helpers: tests/support/, tests/conftest.py).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "servebench"
# every folder of Python source in the repository, as imported (the engine-side package from engine_side/)
SOURCE_FOLDERS = [PACKAGE, ROOT / "flows", ROOT / "tasks", ROOT / "warehouse",
                  ROOT / "engine_side" / "servebench_engine", ROOT / "benchmarks", ROOT / "tests"]
PREFECT_LAYERS = [ROOT / "flows", ROOT / "tasks"]
# top-level folders installed inside the servebench namespace (pyproject.toml's package-dir)
NAMESPACED = {ROOT / "flows", ROOT / "tasks", ROOT / "warehouse"}
VLLM_NAME = re.compile(r"vllm|\bray\b|ray_|_ray\b|\bRay", re.IGNORECASE)
# The names behind each interface, by the folder that alone may say them. llama.cpp is its own name and its
# programs' (`llama-server`, `ggml-rpc-server`); not `llama` (the Llama architecture: the generated tiny-llama
# any engine may serve) nor `gguf`/`ggml` (a model format and its keys, like `hf`: an engine declares the
# formats it serves, the format's code is shared). ssh is the provider's and OpenSSH's (`ssh`, `sshd`); Slurm's
# its own and its commands'.
KIND_NAMES = {
    "servebench/engines/vllm/": VLLM_NAME,
    "servebench/engines/llamacpp/": re.compile(r"llama[._ -]?cpp|llama-server|ggml-rpc|rpc-server", re.IGNORECASE),
    "servebench/providers/ssh/": re.compile(r"ssh", re.IGNORECASE),
    "servebench/providers/slurm/": re.compile(r"slurm|\bsrun\b|salloc|scancel|squeue|sbatch", re.IGNORECASE),
}
# the testbed builds sshd and Slurm hosts on one machine (tests, demos): it is not a provider
TESTBED = ("servebench/devtools/testbed/", "servebench/cli/testbed.py")
NAMED_FOLDERS = [PACKAGE, ROOT / "flows", ROOT / "tasks"]
REGISTRIES = {"servebench/engines/__init__.py", "servebench/providers/__init__.py"}


def modules(folder: Path = PACKAGE) -> dict[str, Path]:
    """The modules of one folder of source, by the name they are imported as."""
    found = {}
    for path in sorted(folder.rglob("*.py")):
        parts = list(path.relative_to(folder.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(["servebench", *parts] if folder in NAMESPACED else parts)] = path
    return found


def repository_modules() -> dict[str, Path]:
    return {name: path for folder in SOURCE_FOLDERS for name, path in modules(folder).items()}


def imports(path: Path, name: str, known: dict[str, Path]) -> set[str]:
    """Every module of the tree this one imports, at any depth of its code (lazy imports count)."""
    tree = ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[:len(package.split(".")) - node.level + 1]
                                + ([base] if base else []))
            targets.add(base)
            targets |= {f"{base}.{alias.name}" for alias in node.names}
    return {t for t in targets if t in known and t != name}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle in the graph, as the modules on it (depth-first search), or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for target in sorted(graph[node]):
            if state.get(target) == 1:
                return stack[stack.index(target):] + [target]
            if target not in state and (cycle := visit(target)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_no_import_cycles():
    known = repository_modules()
    assert {"servebench.flows.campaign", "servebench.tasks.serve", "servebench.warehouse",
            "servebench_engine.dist_alias"} <= set(known)
    graph = {name: imports(path, name, known) for name, path in known.items()}
    # a module importing its own package's __init__ (or the reverse) is how packages work, not a cycle
    graph = {name: {t for t in targets if not name.startswith(t + ".") and not t.startswith(name + ".")}
             for name, targets in graph.items()}
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph))


# The packages of servebench/, bottom first. A module may import its own package and any package of a lower
# layer; packages of one layer do not import each other. The utilities at the root of servebench/ are the
# floor; the load generator and the node sampler run on nodes with the standard library and their own
# folder; `config` holds the campaign's plain data models,
# `models.shapes` the model shapes its fields name. Lazy and TYPE_CHECKING imports count.
LAYERS: list[tuple[str, ...]] = [
    ("servebench.paths", "servebench.cpus", "servebench.logs", "servebench.waiting", "servebench.processes",
     "servebench.plugins", "servebench.progress", "servebench.offline"),
    ("servebench.load", "servebench.telemetry"),
    ("servebench.models.shapes",),
    ("servebench.config",),
    ("servebench.platform",),
    ("servebench.providers",),
    ("servebench.devtools",),
    ("servebench.builds",),
    ("servebench.models",),
    ("servebench.engines",),
    ("servebench.distribution",),
    ("servebench.planning",),
    ("servebench.roofline",),
    ("servebench.prediction",),
    ("servebench.warehouse",),
    ("servebench.serving",),
    ("servebench.analysis",),
    ("servebench.campaign",),
    ("servebench.bisect",),
    ("servebench.tasks",),
    ("servebench.orchestration",),
    ("servebench.flows",),
    ("servebench.cli",),
    ("servebench.__main__",),
]
FLOOR = LAYERS[0]


def package_of(module: str) -> tuple[int, str] | None:
    """(layer index, package) of a servebench module; the floor's utilities count as one package."""
    for index, packages in enumerate(LAYERS):
        for package in packages:
            if module == package or module.startswith(package + "."):
                return index, ("floor" if packages is FLOOR else package)
    return None


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Every import that goes up a layer or sideways into another package of the same layer."""
    found = []
    for name, targets in sorted(graph.items()):
        source = package_of(name)
        if source is None:
            continue
        for target in sorted(targets):
            into = package_of(target)
            if into is None or into[1] == source[1]:
                continue
            if into[0] >= source[0]:
                found.append(f"{name} imports {target} ({into[1]} is not below {source[1]})")
    return found


def test_every_package_has_a_layer():
    packages = {name.split(".")[1] for name in modules() if name.count(".") >= 1}
    packages |= {"flows", "tasks", "warehouse"}
    unplaced = sorted(p for p in packages if package_of(f"servebench.{p}") is None)
    assert not unplaced, f"packages with no layer in LAYERS: {unplaced}"


def test_imports_go_down_the_layers():
    known = {name: path for folder in (PACKAGE, *PREFECT_LAYERS, ROOT / "warehouse")
             for name, path in modules(folder).items()}
    graph = {name: imports(path, name, known) for name, path in known.items()}
    offenders = upward_imports(graph)
    assert not offenders, "imports that go up the layers:\n" + "\n".join(offenders)


def test_the_layer_check_sees_an_upward_import(tmp_path):
    package = tmp_path / "servebench"
    (package / "config").mkdir(parents=True)
    (package / "analysis").mkdir()
    (package / "config" / "__init__.py").write_text("")
    (package / "analysis" / "__init__.py").write_text("")
    (package / "analysis" / "report.py").write_text("from servebench.config import campaign\n")
    (package / "config" / "campaign.py").write_text("from servebench.analysis.report import chart\n")
    known = modules(package)
    graph = {name: imports(path, name, known) for name, path in known.items()}
    offenders = upward_imports(graph)
    assert offenders == ["servebench.config.campaign imports servebench.analysis.report "
                         "(servebench.analysis is not below servebench.config)"]


def test_find_cycle_finds_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_only_the_cli_imports_flows_or_tasks():
    """Under servebench/, the flows are the CLI's alone; the tasks the orchestration's (which calls them so
    Prefect tracks them) and the CLI's."""
    allowed = {"flows": ("servebench.cli",), "tasks": ("servebench.cli", "servebench.orchestration")}
    offenders = []
    for name, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            targets = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            offenders += [f"{name} imports {t}" for t in targets if t.split(".")[:2] in (["servebench", "flows"],
                                                                                      ["servebench", "tasks"])
                          and not any(name == owner or name.startswith(owner + ".")
                                      for owner in allowed[t.split(".")[1]])]
    assert offenders == []


def docstring_ids(tree: ast.AST) -> set[int]:
    """The docstrings of a parsed file (module, classes, functions), by node id: prose, not code."""
    return {id(body[0].value) for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and (body := node.body) and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str)}


SQL = re.compile(r"\bselect\b.*\bfrom\b|\binsert\s+(or\s+\w+\s+)?into\b|\bupdate\s+\S+\s+set\b|\bdelete\s+from\b|"
                 r"\b(create|drop|alter)\s+(or\s+replace\s+)?(table|view|index|sequence)\b", re.IGNORECASE | re.DOTALL)
QUERY_METHODS = {"execute", "executemany", "sql", "query", "fetchone", "fetchall", "fetchdf", "fetchmany"}


def sql_in(path: Path) -> list[str]:
    """Where a file speaks SQL: a string (an f-string with its holes left empty) that reads as a
    statement, a call of a query method (`.execute(...)`, `.sql(...)`, `.fetchall()`...), or DuckDB
    imported; docstrings and comments may describe a query."""
    tree = ast.parse(path.read_text())
    docstrings = docstring_ids(tree)
    found = []
    for node in ast.walk(tree):
        what = None
        if isinstance(node, ast.JoinedStr):
            text = "".join(part.value if isinstance(part, ast.Constant) else "{}" for part in node.values)
            what = f"SQL {text[:60]!r}" if SQL.search(text) else None
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            what = f"SQL {node.value[:60]!r}" if SQL.search(node.value) else None
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in QUERY_METHODS:
            what = f"a query method: .{node.func.attr}()"
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            what = "imports duckdb" if any(name.split(".")[0] == "duckdb" for name in names) else None
        if what:
            found.append((node.lineno, f"{path.relative_to(path.parents[1]).as_posix()}:{node.lineno}: {what}"))
    return [line for _, line in sorted(found, key=lambda item: item[0])]


def test_no_sql_in_flows_or_tasks():
    """Every write to the warehouse is in warehouse/landing.py or warehouse/store.py, every
    read a flow needs a function of the library: flows and tasks compose, the library owns the data."""
    offenders = [line for folder in PREFECT_LAYERS for path in sorted(folder.rglob("*.py")) for line in sql_in(path)]
    assert offenders == [], "SQL in the Prefect layers:\n" + "\n".join(offenders)


def test_the_sql_check_sees_sql(tmp_path):
    sample = tmp_path / "layer" / "sample.py"
    sample.parent.mkdir()
    sample.write_text('"""Reads `select x from cells` in a docstring: allowed."""\n'
                      'import duckdb\n'
                      'ROWS = f"select {metric} from cells where run_id = ?"\n'
                      'con.execute("delete from faults where run_id = ?", [run_id])\n'
                      'WRITE = "insert or replace into capacity (run_id) values (?)"\n'
                      'LABEL = "update the links"\n')
    assert [line.split(": ", 1)[1] for line in sql_in(sample)] == [
        "imports duckdb", "SQL 'select {} from cells where run_id = ?'", "a query method: .execute()",
        "SQL 'delete from faults where run_id = ?'", "SQL 'insert or replace into capacity (run_id) values (?)'"]


def prose_ids(tree: ast.AST) -> set[int]:
    """Docstrings and pydantic field descriptions (`Field(description=...)`), by node id: prose, not code."""
    return docstring_ids(tree) | {id(keyword.value) for node in ast.walk(tree) if isinstance(node, ast.Call)
                                  for keyword in node.keywords if keyword.arg == "description"}


def names_in(path: Path, pattern: re.Pattern = VLLM_NAME) -> list[str]:
    """Identifiers and non-prose strings of a file that match the pattern (name an engine or provider)."""
    tree = ast.parse(path.read_text())
    prose = prose_ids(tree)
    found = []
    for node in ast.walk(tree):
        texts: list[str] = []
        if isinstance(node, ast.Name):
            texts = [node.id]
        elif isinstance(node, ast.Attribute):
            texts = [node.attr]
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            texts = [node.name]
        elif isinstance(node, ast.arg):
            texts = [node.arg]
        elif isinstance(node, ast.alias):
            texts = [node.name, node.asname or ""]
        elif isinstance(node, ast.ImportFrom):
            texts = [node.module or ""]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in prose:
            texts = [node.value]
        found += [f"{path.name}:{node.lineno}: {text[:80]!r}" for text in texts
                  if text and pattern.search(text)]
    return found


def names_outside(folder: str, pattern: re.Pattern) -> list[str]:
    """Where code outside `folder` (registries aside; the testbed too, for a provider) says its names."""
    offenders = []
    for path in sorted(p for source in NAMED_FOLDERS for p in source.rglob("*.py")):
        relative = path.relative_to(ROOT).as_posix()
        if relative.startswith(folder) or relative in REGISTRIES:
            continue
        if folder.startswith("servebench/providers/") and relative.startswith(TESTBED):
            continue
        offenders += [f"{relative.rsplit('/', 1)[0]}/{line}" for line in names_in(path, pattern)]
    return offenders


@pytest.mark.parametrize("folder", list(KIND_NAMES))
def test_no_engine_or_provider_name_outside_its_folder(folder):
    offenders = names_outside(folder, KIND_NAMES[folder])
    assert offenders == [], f"names of {folder} outside it:\n" + "\n".join(offenders)


def test_the_check_sees_engine_and_provider_names(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text('"""Cites vLLM and llama.cpp in a docstring: allowed."""\n# vllm in a comment: allowed\n'
                      'METRIC = "vllm:kv_cache_usage_perc"\nif executor == "ray":\n    pass\n'
                      'BINARY = "bin/llama-server"\nFIELD = Field(None, description="the ssh provider: allowed")\n'
                      'def ssh_argv(host):\n    return ["srun", "--overlap"]\n'
                      'MODEL = {"generate": "tiny-llama", "file": "model.gguf"}\n')
    said = {name: [line.split(": ", 1)[1] for line in names_in(sample, KIND_NAMES[folder])]
            for name, folder in (("vllm", "servebench/engines/vllm/"), ("llamacpp", "servebench/engines/llamacpp/"),
                                 ("ssh", "servebench/providers/ssh/"), ("slurm", "servebench/providers/slurm/"))}
    assert said == {"vllm": ["'vllm:kv_cache_usage_perc'", "'ray'"], "llamacpp": ["'bin/llama-server'"],
                    "ssh": ["'ssh_argv'"], "slurm": ["'srun'"]}


def test_engine_and_provider_folders_are_entered_only_through_their_registries():
    offenders = []
    for name, path in modules().items():
        for target in imports(path, name, modules()):
            for kind_root in ("servebench.engines.", "servebench.providers."):
                if not target.startswith(kind_root):
                    continue
                folder = target[len(kind_root):].split(".")[0]
                if folder in ("base", "inventory", "node_tools", "remote", "this_host", "claims", "fanout"):
                    continue  # the interfaces, and what providers share: inventory, node tools, processes on this
                    # host, claims, per-node work bounded by `hosts_at_once`
                inside = name.startswith(kind_root + folder)
                registry = name in (kind_root.rstrip("."),)
                if not inside and not registry:
                    offenders.append(f"{name} imports {target}")
    assert offenders == [], "\n".join(offenders)


def test_no_test_module_imports_another():
    """Shared helpers live in tests/support/ or as fixtures in tests/conftest.py."""
    offenders = []
    for path in sorted((ROOT / "tests").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            targets = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            offenders += [f"{path.name} imports {t}" for t in targets
                          if t.split(".")[-1].startswith("test_") or t.split(".")[-1] == "conftest"]
    assert offenders == []


MAX_PARAMETERS, MAX_LINES = 8, 80   # a function past these takes a typed object, or is two functions


def oversized_functions(folders: list[Path], root: Path = ROOT) -> list[str]:
    """Every function of these folders with more than MAX_PARAMETERS parameters (self and cls aside) or
    more than MAX_LINES lines, as `path:line name (n parameters, m lines)`."""
    found = []
    for folder in folders:
        for path in sorted(folder.rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    continue
                args = node.args
                named = [*args.posonlyargs, *args.args, *args.kwonlyargs]
                count = len(named) + bool(args.vararg) + bool(args.kwarg) - (named[:1] != [] and
                                                                           named[0].arg in ("self", "cls"))
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if count > MAX_PARAMETERS or lines > MAX_LINES:
                    found.append(f"{path.relative_to(root)}:{node.lineno} {node.name} ({count} parameters, "
                                 f"{lines} lines)")
    return found


def test_no_library_function_takes_over_eight_parameters_or_eighty_lines():
    assert oversized_functions([PACKAGE, ROOT / "warehouse"]) == []


def test_the_size_check_sees_a_long_parameter_list(tmp_path):
    moved = tmp_path / "pkg"
    moved.mkdir()
    (moved / "wide.py").write_text("def wide(a, b, c, d, e, f, g, h, i):\n    return a\n\n\n"
                                   "class C:\n    def fine(self, a, b, c, d, e, f, g, h):\n        return a\n")
    assert oversized_functions([moved], root=tmp_path) == ["pkg/wide.py:1 wide (9 parameters, 2 lines)"]
