"""The columns the Trident driver and the Spark tasks share are named in one module
(`squall.runtime.spark.trident.schema`): no other module of the package spells one."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from squall.runtime.spark.trident import schema

PACKAGE = Path(schema.__file__).parent


def _docstrings(tree: ast.Module) -> set[int]:
    """The ids of the string constants that are docstrings (module, class, function)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) \
                and node.body and isinstance(node.body[0], ast.Expr) \
                and isinstance(node.body[0].value, ast.Constant):
            out.add(id(node.body[0].value))
    return out


def shared_columns_spelt(source: str) -> list[tuple[int, str]]:
    """(line, text) of each string literal in `source` (f-strings' literal parts included,
    docstrings left out) that holds a column name: `$` and a letter (a regular expression's
    `$` is not one)."""
    tree = ast.parse(source)
    docs = _docstrings(tree)
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and re.search(r"\$[A-Za-z]", node.value) and id(node) not in docs]


def test_the_check_finds_a_column_spelt_out():
    source = '"""Reads `$sp`."""\nx = "$sp"\ny = f"$p{1}"\nz = "p"\nline = r"^a$"\n'
    assert shared_columns_spelt(source) == [(2, "$sp"), (3, "$p")]


def test_no_module_but_the_schema_spells_a_shared_column():
    modules = sorted(PACKAGE.glob("*.py"))
    assert len(modules) > 5
    found = {path.name: hits for path in modules if path.name != "schema.py"
             if (hits := shared_columns_spelt(path.read_text()))}
    assert found == {}


def test_the_schema_names_distinct_columns_apart_from_its_two_n():
    names = {n: getattr(schema, n) for n in dir(schema) if n.isupper()}
    columns = [v for v in names.values() if isinstance(v, str)]
    assert all(c.startswith("$") for c in columns)
    assert names["WRITTEN"] == names["WINDOW_TUPLES"]  # outputs of different jobs
    assert len(set(columns)) == len(columns) - 1
    assert len({schema.stacked(0), schema.valued(0), schema.value("i"), *columns}) \
        == len(columns) + 2
