"""Shared test helpers: paths to the repository's examples."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent


def load_example(name: str) -> ModuleType:
    """Import examples/<name>.py as a module (examples are scripts, not a package)."""
    mod_name = f"squall_example_{name}"
    if mod_name in sys.modules:
        return sys.modules[mod_name]
    spec = importlib.util.spec_from_file_location(mod_name, ROOT / "examples" / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def root() -> Path:
    return ROOT


@pytest.fixture(scope="module")
def spark_session():
    """One Spark session (local[2]) per test module, with squall's own defaults."""
    import os
    import sys

    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from squall.runtime.spark.session import get_session

    spark = get_session("local[2]", {"spark.ui.enabled": "false"})
    yield spark
    spark.stop()
