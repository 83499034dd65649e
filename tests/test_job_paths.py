"""Every route (app/api) and CLI command (app/cli) reaches a worker only through app/jobs: each job
handed to a pool or a runner is a function of an app.jobs module, and neither package imports
app.bridge (torch's door, which only a job opens inside its worker).

Read from the sources: a call that hands work on is `<x>.submit(...)`, `<x>.submit_if_idle(...)`,
`<x>.run(...)`, a call given such a bound method (`run_sync(work.run, job, ...)`), or a call of a
function found to pass one of its own parameters on as the job (`on_stored`, `_in_worker`): at
those, the job argument must resolve, in the module's namespace, to a function of app.jobs.
"""

from __future__ import annotations

import ast
import importlib
import inspect
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("app/api", "app/cli")
#: the methods that hand a job on (the pools', the runners', an admitted request's)
HANDING = {"submit", "submit_if_idle", "run"}


@dataclass(frozen=True)
class Module:
    """A module's source tree and its imported namespace (where the names of its jobs resolve)."""

    name: str
    tree: ast.Module
    namespace: ModuleType


def _modules() -> list[Module]:
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).glob("*.py")):
            if path.stem == "__main__":
                continue  # runs the command when imported, and hands nothing on itself
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            tree = ast.parse(path.read_text(), str(path))
            found.append(Module(name, tree, importlib.import_module(name)))
    return found


def _resolve(node: ast.expr, module: ModuleType) -> object:
    """What a name or dotted name means in the module (None: not a module-level name)."""
    if isinstance(node, ast.Name):
        return getattr(module, node.id, None)
    if isinstance(node, ast.Attribute):
        base = _resolve(node.value, module)
        return None if base is None else getattr(base, node.attr, None)
    return None


def _handing(call: ast.Call) -> list[ast.expr] | None:
    """The arguments among which a job is handed on, if the call hands one on."""
    func = call.func
    if isinstance(func, ast.Attribute) and func.attr in HANDING and call.args:
        return list(call.args)
    bound = [
        i
        for i, arg in enumerate(call.args)
        if isinstance(arg, ast.Attribute) and arg.attr in HANDING
    ]
    return list(call.args[bound[0] + 1 :]) if bound else None


def _called(call: ast.Call) -> str | None:
    func = call.func
    if isinstance(func, ast.Name):
        return func.id
    return func.attr if isinstance(func, ast.Attribute) else None


def _functions(tree: ast.Module) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    return [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]


def _positional(function: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    names = [a.arg for a in (*function.args.posonlyargs, *function.args.args)]
    return names[1:] if names[:1] in (["self"], ["cls"]) else names


def _problem(
    arg: ast.expr, module: Module, local: set[str], params: list[str]
) -> tuple[str | None, str | None]:
    """(why this argument is not a job of app.jobs, or None; the parameter it forwards, if any)."""
    where = f"{module.name}:{arg.lineno}"
    if isinstance(arg, ast.Lambda):
        return f"{where}: a lambda handed on as a job", None
    if isinstance(arg, ast.Name) and arg.id in local:
        return f"{where}: {arg.id}, a function of the module's own, handed on as a job", None
    if isinstance(arg, ast.Name) and arg.id in params:
        return None, arg.id
    target = _resolve(arg, module.namespace)
    if inspect.isfunction(target) and not target.__module__.startswith("app.jobs."):
        return f"{where}: {target.__module__}.{target.__qualname__} is not a job of app.jobs", None
    return None, None


def violations(modules: list[Module]) -> list[str]:
    """Every job handed on in the modules that is not a function of app.jobs."""
    found: list[str] = []
    #: function name -> index of its positional parameter it hands on as a job
    dispatchers: dict[str, int] = {}
    sites: list[tuple[Module, ast.Call, set[str]]] = []
    for module in modules:
        for function in _functions(module.tree):
            local = {
                n.name
                for n in ast.walk(function)
                if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n is not function
            }
            params = _positional(function)
            for call in ast.walk(function):
                if not isinstance(call, ast.Call):
                    continue
                sites.append((module, call, local))
                for arg in _handing(call) or []:
                    problem, forwarded = _problem(arg, module, local, params)
                    found += [problem] if problem else []
                    if forwarded is not None:
                        dispatchers[function.name] = params.index(forwarded)
    for module, call, local in sites:
        index = dispatchers.get(_called(call) or "")
        if index is None or index >= len(call.args) or _handing(call) is not None:
            continue
        problem, _ = _problem(call.args[index], module, local, [])
        found += [problem] if problem else []
    return found


def test_routes_and_commands_hand_workers_only_jobs_of_app_jobs() -> None:
    modules = _modules()
    assert violations(modules) == []
    # the scan sees what it is meant to: the routes and commands do hand jobs on
    handed = [
        arg
        for module in modules
        for call in ast.walk(module.tree)
        if isinstance(call, ast.Call)
        for arg in _handing(call) or []
        if inspect.isfunction(_resolve(arg, module.namespace))
    ]
    assert len(handed) >= 10


def test_routes_and_commands_never_import_the_bridge() -> None:
    for module in _modules():
        for node in ast.walk(module.tree):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            bridge = [n for n in names if n == "app.bridge" or n.startswith("app.bridge.")]
            assert not bridge, f"{module.name} imports {bridge}"


@pytest.mark.parametrize(
    ("added", "why"),
    [
        ("def _bad(work: Work) -> None:\n    work.run(ops.canonical, None)\n", "not a job"),
        (
            "def _bad(pool: PoolDep) -> None:\n    pool.submit(lambda: 1)\n",
            "a lambda",
        ),
        (
            "def _bad(work: Work) -> None:\n    def here() -> None: ...\n    work.run(here)\n",
            "a function of the module's own",
        ),
        (
            "def _hands(work: Work, job: object) -> None:\n    work.run(job)\n"
            "def _bad(work: Work) -> None:\n    _hands(work, render_text)\n",
            "not a job",
        ),
    ],
)
def test_a_non_job_handed_to_a_worker_is_found(added: str, why: str) -> None:
    """The scan fails on each way of handing on something other than a job of app.jobs."""
    programs = next(m for m in _modules() if m.name == "app.api.programs")
    source = (ROOT / "app/api/programs.py").read_text() + "\n\n" + added
    changed = Module(programs.name, ast.parse(source), programs.namespace)
    found = violations([changed])
    assert len(found) == 1, found
    assert why in found[0]
