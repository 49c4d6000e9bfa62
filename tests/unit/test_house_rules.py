"""The house's rules, read from the source. Imports: the shared core (chalicelib/core/) and the
edge (edge/) never import Chalice, the core never imports the Chalice layer (the rest of
chalicelib/), and the edge imports nothing of chalicelib outside the core (every import
statement, at any depth, including those inside functions, so a lazy import breaks it too).
Error codes come from catalogs, never literals. No module of the edge or the core reaches into
another's private names. The repository names nothing outside it. Nothing outside the tests
(the product, stacks/, scripts/, the benchmarks) imports them."""

import ast
import os
import pathlib
import re
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _imports(path: pathlib.Path):
    tree = ast.parse(path.read_text(), str(path))
    package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            yield node.lineno, module
            for alias in node.names:  # `from chalicelib import web` names a module
                yield node.lineno, f"{module}.{alias.name}"


def _files(folder: str):
    return sorted((ROOT / folder).rglob("*.py"))


def _refused(module: str, allowed_chalicelib: str) -> bool:
    if module == "chalice" or module.startswith("chalice."):
        return True
    if module.startswith("chalicelib."):
        return not (module == allowed_chalicelib or module.startswith(allowed_chalicelib + "."))
    return False


@pytest.mark.parametrize("folder", ["chalicelib/core", "edge"])
def test_the_core_and_the_edge_import_neither_chalice_nor_the_chalice_layer(folder):
    bad = [
        f"{path.relative_to(ROOT)}:{line} imports {module}"
        for path in _files(folder)
        for line, module in _imports(path)
        if _refused(module, "chalicelib.core")
    ]
    assert bad == []


def test_the_rule_sees_a_lazy_import_inside_a_function(tmp_path, monkeypatch):
    sample = ROOT / "edge" / "_sample_for_the_rule.py"
    sample.write_text("def f():\n    from chalicelib import web\n    return web\n")
    try:
        found = [m for _, m in _imports(sample) if _refused(m, "chalicelib.core")]
    finally:
        sample.unlink()
    assert found == ["chalicelib.web"]


def test_the_edge_process_loads_no_chalice_module():
    """Importing every edge module (what `python -m edge` can reach) leaves Chalice unloaded."""
    import subprocess
    import sys

    modules = sorted(
        p.stem for p in _files("edge") if p.parent == ROOT / "edge" and p.stem != "__init__"
    )
    code = (
        "import sys\n"
        + "".join(f"import edge.{m}\n" for m in modules)
        + "print(sorted(m for m in sys.modules if m == 'chalice' or "
        "m.startswith('chalice.') or (m.startswith('chalicelib.') and "
        "not m.startswith('chalicelib.core'))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"


CATALOGS = {
    ROOT / "chalicelib" / "core" / "errors.py",
    ROOT / "chalicelib" / "core" / "edge_errors.py",
}


def _code_literals(path: pathlib.Path):
    """``ERR_…`` string literals in code (docstrings, which document codes, left out)."""
    tree = ast.parse(path.read_text(), str(path))
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in docstrings
            and re.fullmatch(r"ERR_[A-Z0-9_]+", node.value)
        ):
            yield node.lineno, node.value


@pytest.mark.parametrize("folder", ["chalicelib/core", "edge"])
def test_error_codes_are_named_from_a_catalog_never_written_as_literals(folder):
    bad = [
        f"{path.relative_to(ROOT)}:{line} {code}"
        for path in _files(folder)
        if path not in CATALOGS and "bench" not in path.parts
        for line, code in _code_literals(path)
    ]
    assert bad == []


def test_the_literal_rule_sees_a_code_in_a_call_but_not_in_a_docstring(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text(
        '"""ERR_NGROK_1 is documented here."""\nraise Refused("ERR_NGROK_334", "x")\n'
    )
    assert list(_code_literals(sample)) == [(2, "ERR_NGROK_334")]


def test_the_repository_names_no_file_outside_it_and_no_tracker_issue():
    """A clone stands alone: no text sends the reader to files beside the repository
    (the design folder shared beside it) or to a tracker's issue numbers."""
    import subprocess

    files = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    pattern = re.compile(r"\.\./shared|\b[Ii]ssue #?[0-9]+\b")
    bad = []
    for name in files:
        if name.endswith((".png", ".jpg", ".ico", ".pem", ".zip", ".json")):
            continue
        try:
            text = (ROOT / name).read_text()
        except (UnicodeDecodeError, FileNotFoundError, IsADirectoryError):
            continue
        bad += [
            f"{name}:{n}"
            for n, line in enumerate(text.splitlines(), 1)
            if pattern.search(line) and name != "tests/unit/test_house_rules.py"
        ]
    assert bad == []


# ---- no private names across modules ---------------------------------------------------------
def _privates_defined(tree: ast.AST) -> set:
    """The ``_names`` a module defines: functions, classes, module names, attributes it sets."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
    return {name for name in names if name.startswith("_") and not name.startswith("__")}


def _private_reaches(paths) -> list:
    """``x._name`` where ``_name`` is one of our modules' private names that the module doing
    it does not define itself (``self``, ``cls`` and ``super()`` excepted)."""
    trees = {path: ast.parse(path.read_text()) for path in paths}
    defined = {path: _privates_defined(tree) for path, tree in trees.items()}
    ours = set().union(*defined.values())
    found = []
    for path, tree in trees.items():
        for node in ast.walk(tree):
            if (
                not (isinstance(node, ast.Attribute) and node.attr in ours)
                or node.attr in defined[path]
            ):
                continue
            owner = node.value
            if isinstance(owner, ast.Name) and owner.id in ("self", "cls"):
                continue
            if isinstance(owner, ast.Call) and getattr(owner.func, "id", "") == "super":
                continue
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_module_of_the_edge_or_the_api_reaches_into_anothers_private_names():
    """A private name (``_x``) is its module's own: another module calling ``front._send`` or
    ``edge._release_port`` leans on what its owner may change; it asks for a public name."""
    paths = [*_files("edge"), *_files("chalicelib"), ROOT / "app.py"]
    assert _private_reaches(paths) == []


def test_the_private_rule_sees_a_call_into_another_module(tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    (tmp_path / "owner.py").write_text("class Front:\n    def _send(self):\n        pass\n")
    (tmp_path / "user.py").write_text("def go(front):\n    front._send()\n")
    (tmp_path / "own.py").write_text("class A:\n    def _x(self):\n        self._x()\n")
    found = _private_reaches([tmp_path / "owner.py", tmp_path / "user.py", tmp_path / "own.py"])
    assert found == ["user.py:2: front._send"]


# ---- nothing changes sys.path --------------------------------------------------------------
# The project is installed (editable, `make install`): tests, scripts and benchmarks import it
# from any directory, and a subprocess that needs another path gets it by PYTHONPATH. A change
# of sys.path hides a missing install, shadows modules, and depends on the working directory.
_PATH_CHANGE = re.compile(
    r"\bsys\.path\s*(\.\s*(insert|append|extend|remove|pop|clear)\s*\(|\[[^\]]*\]\s*=|\+?=(?!=))"
)
_NOT_OURS = ("vendor", "build", "node_modules", "__pycache__", "mutants", "dist")


def _python_files(root: pathlib.Path):
    """Every .py file of the repository, outside virtualenvs, vendored and built trees."""
    for folder, dirs, files in os.walk(root):
        dirs[:] = [
            d
            for d in dirs
            if not d.startswith(".") and d not in _NOT_OURS  # .venv*, .git
        ]
        for name in files:
            if name.endswith(".py"):
                yield pathlib.Path(folder) / name


def _path_changes(root: pathlib.Path) -> list:
    return [
        f"{path.relative_to(root)}:{n}: {line.strip()}"
        for path in sorted(_python_files(root))
        for n, line in enumerate(path.read_text(errors="replace").split("\n"), 1)
        if _PATH_CHANGE.search(line)
    ]


def _imports_of_tests(root: pathlib.Path) -> list:
    """Imports of the ``tests`` package by files outside any ``tests`` folder."""
    return [
        f"{path.relative_to(root)}:{line} imports {module}"
        for path in sorted(_python_files(root))
        if "tests" not in path.relative_to(root).parts
        for line, module in _imports(path)
        if module == "tests" or module.startswith("tests.")
    ]


def test_nothing_outside_the_tests_imports_them():
    """What tests and benchmarks share lives in stacks/ (the in-process API, store-call counts,
    accounts, certificates); a benchmark or a tool that imports tests/ breaks when a test moves."""
    assert _imports_of_tests(ROOT) == []


def test_the_tests_import_rule_sees_a_lazy_import(tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    (tmp_path / "bench").mkdir()
    (tmp_path / "tests").mkdir()
    (tmp_path / "bench" / "b.py").write_text("def f():\n    from tests.support import api\n")
    (tmp_path / "tests" / "t.py").write_text("from tests.support import api\n")
    assert _imports_of_tests(tmp_path) == [
        "bench/b.py:2 imports tests.support",
        "bench/b.py:2 imports tests.support.api",
    ]


def test_no_python_file_changes_sys_path():
    assert _path_changes(ROOT) == []


def test_the_path_rule_sees_every_kind_of_change(tmp_path):
    path = "sys" + ".path"
    lines = [
        f"{path}.insert(0, '.')",
        f"    {path}.append(x)",
        f"{path}[:0] = [a, b]",
        f"x = 1; {path} += ['a']",
        f"{path} = []",
    ]
    (tmp_path / "x.py").write_text("\n".join(["import sys", *lines, f"print({path})"]))
    for skipped in (".venv-agent", "vendor", "node_modules"):
        (tmp_path / skipped).mkdir()
        (tmp_path / skipped / "y.py").write_text(lines[0])
    found = _path_changes(tmp_path)
    assert [hit.split(":")[1] for hit in found] == ["2", "3", "4", "5", "6"], found
