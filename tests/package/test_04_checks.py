"""The checks that keep the code as the house rules say: the linter and the type checker find
nothing in wal3_spark/, and every name of the project's code a docstring or a document gives
in backticks exists (docs/development.md, "Checks")."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import pkgutil
import re
import subprocess
import sys
import types
from collections.abc import Iterator
from pathlib import Path

import wal3_spark

ROOT = next(p for p in Path(__file__).resolve().parents if (p / "pyproject.toml").exists())
PACKAGE = ROOT / "wal3_spark"
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    """A tool of the test extra, run with the project's configuration (pyproject.toml)."""
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)


def test_00_ruff_finds_nothing():
    result = _run("ruff", "check", "--output-format", "concise", "wal3_spark")
    assert result.returncode == 0, (
        "ruff (pyproject.toml's [tool.ruff]) found:\n" + result.stdout[-6000:] + result.stderr[-2000:]
        + "\nrun `./dev ruff check wal3_spark` (with --fix for the safe fixes) and fix the rest by hand"
    )


def test_01_mypy_finds_nothing():
    """mypy keeps its cache in .mypy_cache: after the first run it checks only what changed."""
    result = _run("mypy")
    assert result.returncode == 0, (
        "mypy (pyproject.toml's [tool.mypy]) found:\n" + result.stdout[-6000:] + result.stderr[-2000:]
        + "\nrun `./dev mypy`; an ignore names its code and says why (`# type: ignore[code]  # why`)"
    )


# ------------------------------------------------------------- names of the code in the prose

#: a backticked dotted name, `a.b` or `a.b.c()`
DOTTED = re.compile(r"`([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)(?:\(\))?`")
#: `errors.py`, `summary.json`: a file's name, not the code's
FILE_SUFFIXES = {"py", "md", "json", "jsonl", "toml", "yml", "yaml", "txt", "html", "zip", "gz", "csv", "conf"}
MODULES = sorted(info.name for info in pkgutil.walk_packages(wal3_spark.__path__, "wal3_spark."))
#: the package's layers and top modules (`log`, `format`, `clock`, ...)
LAYERS = {name.split(".")[1] for name in MODULES}
#: each module by its own name (`invariants`: wal3_spark.log.invariants)
BY_SHORT_NAME: dict[str, list[str]] = {}
for _name in MODULES:
    BY_SHORT_NAME.setdefault(_name.rsplit(".", 1)[1], []).append(_name)


def _classes() -> tuple[dict[str, list[str]], dict[tuple[str, str], set[str]]]:
    """Each module-level class of the package: the modules defining a class of that name, and the
    attributes its methods assign on `self` (instance attributes no import can show)."""
    where: dict[str, list[str]] = {}
    assigned: dict[tuple[str, str], set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef):
                where.setdefault(node.name, []).append(module)
                assigned[(module, node.name)] = {
                    n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store)
                    and isinstance(n.value, ast.Name) and n.value.id == "self"}
    return where, assigned


CLASSES, INSTANCE_ATTRIBUTES = _classes()


def _has(obj: object, name: str) -> bool:
    """An attribute, or a declared field of a class (a dataclass's, a Protocol's, a slot)."""
    return hasattr(obj, name) or any(
        name in getattr(k, "__annotations__", {}) for k in getattr(obj, "__mro__", ()))


def _follows(obj: object, parts: list[str]) -> bool:
    """Whether the attributes `parts` lead on from `obj`. A class or function reached through a
    module (not a package's re-export) must be defined there: a name imported by a module it
    moved out of is its old address."""
    for part in parts:
        if not _has(obj, part):
            return False
        found = getattr(obj, part, None)
        if (isinstance(obj, types.ModuleType) and not hasattr(obj, "__path__")
                and (inspect.isclass(found) or inspect.isfunction(found)) and found.__module__ != obj.__name__):
            return False
        obj = found
    return True


def _resolves(parts: list[str]) -> bool:
    """The longest importable module prefix of `parts`, and the rest as its attributes."""
    for i in range(len(parts), 0, -1):
        try:
            module = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        return _follows(module, parts[i:])
    return False


def project_name_resolves(name: str) -> bool | None:
    """Whether a backticked dotted name that names the project's code exists; None when it does not
    name the project's code (docs/development.md, "Checks", says which names do)."""
    parts = name.split(".")
    head = parts[0]
    if parts[-1] in FILE_SUFFIXES:
        return None
    if head in ("wal3_spark", "pyspark_wal3"):
        return _resolves(parts)
    if head in CLASSES:
        return any(_follows(getattr(importlib.import_module(m), head), parts[1:])
                   or (len(parts) == 2 and parts[1] in INSTANCE_ATTRIBUTES[(m, head)]) for m in CLASSES[head])
    if head in LAYERS:
        if head == "spark" and f"wal3_spark.spark.{parts[1]}" not in MODULES:
            return None  # Spark's own: spark.read, spark.sql.shuffle.partitions
        return _resolves(["wal3_spark", *parts])
    if head in BY_SHORT_NAME and importlib.util.find_spec(head) is None:
        return any(_resolves([*m.split("."), *parts[1:]]) for m in BY_SHORT_NAME[head])
    return None


def _docstrings(path: Path) -> Iterator[str]:
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                yield doc


def _backticked() -> Iterator[tuple[str, str]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        for doc in _docstrings(path):
            yield from ((str(path.relative_to(ROOT)), m.group(1)) for m in DOTTED.finditer(doc))
    for path in DOCUMENTS:
        yield from ((str(path.relative_to(ROOT)), m.group(1)) for m in DOTTED.finditer(path.read_text()))


def test_02_the_rule_tells_the_projects_names_from_others():
    assert project_name_resolves("wal3_spark.log.manifest_reader.incarnations_agree")
    assert project_name_resolves("log.manifest_reader.incarnations_agree")
    assert project_name_resolves("invariants.check_same_log")
    assert project_name_resolves("Manifest.scrub")
    assert project_name_resolves("LogWriter.append")
    assert project_name_resolves("FragmentFile.records")  # a dataclass field
    assert project_name_resolves("wal3_spark.log.head.no_such_function") is False
    assert project_name_resolves("log.reader.load_fragment") is False  # imported there, defined elsewhere
    assert project_name_resolves("Manifest.no_such_method") is False
    assert project_name_resolves("invariants.no_such_check") is False
    for other in ("spark.sql.shuffle.partitions", "df.write", "pyarrow.RecordBatchReader", "gc.freeze",
                  "errors.py", "Trigger.AvailableNow"):
        assert project_name_resolves(other) is None, other


def test_03_every_backticked_name_of_the_code_exists():
    missing = sorted({f"{where}: `{name}`" for where, name in _backticked() if project_name_resolves(name) is False})
    assert not missing, (
        "backticked names of the project's code that do not exist (moved or renamed?); name them where "
        "they are defined, or an object's attribute by its class (`LogScan.position`):\n" + "\n".join(missing)
    )


# ------------------------------------------------------------------ design notes, one per decision

NOTES = sorted((ROOT / "docs" / "design").glob("[0-9]*.md"))


def test_04_each_design_note_names_the_modules_it_governs_and_they_point_back():
    """docs/design/NN-topic.md: one decision per note, numbered by layer; its **Governs:** line
    names modules of the package, whose docstrings point to the note (docs/design/index.md)."""
    index = (ROOT / "docs" / "design" / "index.md").read_text()
    problems = []
    numbers = [n.name[:2] for n in NOTES]
    problems += [f"two notes numbered {x}" for x in sorted({x for x in numbers if numbers.count(x) > 1})]
    for note in NOTES:
        where = f"docs/design/{note.name}"
        if not re.fullmatch(r"\d\d-[a-z0-9-]+\.md", note.name):
            problems.append(f"{where}: name it NN-topic.md")
        lines = note.read_text().splitlines()
        governs = next((line for line in lines[:6] if line.startswith("**Governs:**")), None)
        if not lines or not lines[0].startswith("# ") or governs is None:
            problems.append(f"{where}: a '# Title' line, then a '**Governs:**' line naming its modules")
            continue
        modules = re.findall(r"`([\w.]+)`", governs)
        if not modules:
            problems.append(f"{where}: the **Governs:** line names no module")
        for module in modules:
            if importlib.util.find_spec(module) is None:
                problems.append(f"{where}: governs `{module}`, which is not a module")
                continue
            doc = inspect.getdoc(importlib.import_module(module)) or ""
            if where not in doc:
                problems.append(f"{module}'s docstring does not point to {where}")
        if f"]({note.name})" not in index:
            problems.append(f"docs/design/index.md does not list {where}")
    assert NOTES and not problems, "\n".join(problems)
