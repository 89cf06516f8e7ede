"""The static rules, enforced with the tests: ruff on the whole tree, mypy on the type-clean set,
the import layers, and no import cycle.

The rules themselves live in pyproject.toml (`[tool.ruff.lint]` selects the ruff rules,
`[tool.mypy] files` lists the modules held type-clean: `mypy` without arguments checks them) and
in `.importlinter` (the layer contract of docs/design/architecture.md). A failure shows the tool's
report.
"""

from __future__ import annotations

import configparser
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)


def test_ruff_finds_nothing():
    proc = _run("ruff", "check", "--no-cache", "src", "tests", "benchmarks", "examples")
    if proc.returncode != 0:
        pytest.fail(proc.stdout + proc.stderr, pytrace=False)


def test_mypy_finds_nothing_in_the_clean_set():
    proc = _run("mypy")
    if proc.returncode != 0:
        pytest.fail(proc.stdout + proc.stderr, pytrace=False)


def test_imports_follow_the_layers():
    # The console script of import-linter, next to this interpreter (the venv's bin/).
    lint_imports = Path(sys.executable).with_name("lint-imports")
    proc = subprocess.run([str(lint_imports), "--no-cache"], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    if proc.returncode != 0:
        pytest.fail(proc.stdout + proc.stderr, pytrace=False)


def test_no_import_cycles():
    """No cycle between squall's modules, imports inside functions and under TYPE_CHECKING
    included (scripts/import_cycles.py exits non-zero on one)."""
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "import_cycles.py")], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        pytest.fail(proc.stdout + proc.stderr, pytrace=False)


def test_the_layer_contract_catches_an_upward_import(tmp_path):
    """The contract is not vacuous: a core importing the task layer breaks it."""
    package = tmp_path / "squall"
    for sub in ("", "reliability", "task"):
        (package / sub).mkdir(parents=True, exist_ok=True)
        (package / sub / "__init__.py").write_text("")
    (package / "reliability" / "acker.py").write_text("import squall.task.tasks\n")
    (package / "task" / "tasks.py").write_text("")
    (tmp_path / ".importlinter").write_text(textwrap.dedent("""\
        [importlinter]
        root_package = squall

        [importlinter:contract:layers]
        name = layers
        type = layers
        containers =
            squall
        layers =
            task
            reliability
        """))
    lint_imports = Path(sys.executable).with_name("lint-imports")
    proc = subprocess.run([str(lint_imports), "--no-cache"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300, env={"PYTHONPATH": str(tmp_path)})
    assert proc.returncode != 0
    assert "squall.reliability is not allowed to import squall.task" in proc.stdout


def _modules_of(package: Path, prefix: str) -> set[str]:
    names = set()
    for path in package.rglob("*.py"):
        parts = path.relative_to(package).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names.add(".".join((prefix, *parts)))
    return names


def test_the_pyspark_contract_names_every_module_outside_runtime_spark():
    """pyspark stays in `squall.runtime.spark`: the forbidden contract covers every other module
    of the package, so a new package cannot import pyspark unnoticed because nobody listed it."""
    config = configparser.ConfigParser()
    config.read(ROOT / ".importlinter")
    packages = config["importlinter:contract:spark"]["source_modules"].split()
    modules = config["importlinter:contract:spark-root"]["source_modules"].split()
    assert config["importlinter:contract:spark-root"]["as_packages"] == "False"
    uncovered = sorted(
        name for name in _modules_of(ROOT / "src" / "squall", "squall")
        if not (name == "squall.runtime.spark" or name.startswith("squall.runtime.spark."))
        and name not in modules
        and not any(name == p or name.startswith(p + ".") for p in packages))
    assert uncovered == [], f"add to [importlinter:contract:spark] in .importlinter: {uncovered}"


def test_a_spark_runner_imports_only_its_own_runner_before_spark_starts():
    """Everything `make_runner` imports delays Spark's start: a plain topology's runner must not
    bring the Trident runner (and pandas with it) or the transactional one."""
    script = textwrap.dedent("""
        import sys
        from squall import Fields, TopologyBuilder
        from squall.runners import make_runner
        from squall.runtime.spark import driver
        from squall.testing import FixedTupleSpout

        class SparkWouldStartHere(Exception):
            pass

        def get_session(*args, **kwargs):
            raise SparkWouldStartHere()

        driver.get_session = get_session
        b = TopologyBuilder()
        b.set_spout("numbers", FixedTupleSpout([[1]], Fields("n")))
        try:
            make_runner(b.create_topology(), runner="spark")
        except SparkWouldStartHere:
            pass
        print(sorted(m for m in ("pandas", "squall.runtime.spark.trident",
                                 "squall.runtime.spark.transactional") if m in sys.modules))
    """)
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]", proc.stdout
