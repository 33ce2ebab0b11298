"""The shape of the code (docs/architecture.md): import contracts, the app layout, module sizes.

`make lint` (part of `make test`) runs the contracts of `.importlinter` on the tree; here a copy of the tree with
one forbidden import added shows each kind of contract really breaks.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("apps", "gryvia_site", "collector", "gryvia_cli", "gryvia_trainer")
APPS = sorted(p.name for p in (ROOT / "apps").iterdir() if (p / "apps.py").exists())
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
MAX_LINES = 400


def _copy_tree(target: Path) -> None:
    keep_py = shutil.ignore_patterns("__pycache__", "static", "*.pyc")
    for package in PACKAGES:
        shutil.copytree(ROOT / package, target / package, ignore=keep_py)
    (target / "tests").mkdir()
    for name in ("__init__.py", "import_contracts.py"):
        shutil.copy(ROOT / "tests" / name, target / "tests" / name)
    shutil.copy(ROOT / ".importlinter", target / ".importlinter")


def _lint_imports(cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"],
        cwd=cwd,
        env={"PYTHONPATH": str(cwd), "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_import_contracts_hold_on_this_tree():
    result = _lint_imports(ROOT)
    assert result.returncode == 0, result.stdout[-4000:]


@pytest.mark.parametrize(
    ("module", "line", "contract"),
    [
        # core is below every app: importing one is a cycle waiting to happen
        ("apps/core/views.py", "from apps.tenants import services", "Apps depend downward only"),
        # billing is below jobs
        ("apps/billing/tasks.py", "from apps.jobs import selectors", "Apps depend downward only"),
        # another app's inside: only its services, selectors, models and choices
        ("apps/jobs/selectors.py", "from apps.llm.gateway import errors", "An app reaches another app only through"),
        # inside an app, models are the bottom layer
        ("apps/webhooks/models.py", "from apps.webhooks import services", "Inside an app"),
        # the node agent imports no Django
        ("collector/__init__.py", "import django", "The node agent, the CLI and the trainer"),
    ],
)
def test_a_forbidden_import_breaks_the_contracts(tmp_path, module, line, contract):
    _copy_tree(tmp_path)
    assert _lint_imports(tmp_path).returncode == 0  # the copy itself is clean
    path = tmp_path / module
    path.write_text(path.read_text() + f"\n{line}  # added by the test\n")
    result = _lint_imports(tmp_path)
    assert result.returncode == 1
    broken = result.stdout.split("Broken contracts", 1)[1]
    assert contract in broken
    assert module.removesuffix(".py").removesuffix("/__init__").replace("/", ".") in broken


def _source_modules() -> list[Path]:
    found = []
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            if "migrations" not in path.parts:
                found.append(path)
    return found


def test_no_module_is_over_400_lines():
    long = {
        str(path.relative_to(ROOT)): n
        for path in _source_modules()
        if (n := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}, f"split these into packages (CONVENTIONS.md): {long}"


def _public_face(app: str, name: str) -> Path | None:
    base = ROOT / "apps" / app
    if (base / name / "__init__.py").exists():
        return base / name / "__init__.py"
    if (base / f"{name}.py").exists():
        return base / f"{name}.py"
    return None


def _declares_all(path: Path) -> bool:
    tree = ast.parse(path.read_text())
    return any(
        isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets)
        for node in tree.body
    )


@pytest.mark.parametrize("app", APPS)
def test_every_app_has_the_layout_of_docs_architecture(app):
    base = ROOT / "apps" / app
    assert (base / "README.md").exists(), f"apps/{app}/README.md says what the app owns"
    if app == "core":  # the framework: every module of it is public (docs/architecture.md)
        return
    services = _public_face(app, "services")
    assert services is not None and _declares_all(services), f"apps/{app}: services with __all__"
    selectors = _public_face(app, "selectors")
    if selectors is not None:
        assert _declares_all(selectors), f"apps/{app}: selectors with __all__"
    # one home per kind of module: no models or admin spread over loose sibling files
    loose = sorted(p.name for p in base.glob("*.py") if p.stem.endswith(("_models", "_admin", "_services")))
    assert loose == [], f"apps/{app}: move {loose} into models/, admin/ or services/"
    model_files = [p for p in base.glob("models*.py")]
    assert len(model_files) <= 1


def test_periodic_work_is_registered_by_the_apps_not_listed_in_settings():
    assert not hasattr(settings, "GRYVIA_PERIODIC")
