"""The package installs like one: `python -m build` gives a wheel and an sdist that `twine check
--strict` accepts, without a setuptools warning; the wheel, installed into a fresh virtual
environment outside the repository, has its package data and runs `squall --version` and an
example topology.

The default run tests this interpreter's version; `-m long` adds every other supported Python
version (the classifiers in pyproject.toml) that the machine has as `python3.X` (under pyenv,
any installed version). pip installs the
dependencies from its cache when an earlier install left them there (the bootstrap's), so
nothing is downloaded again on a machine that has run the suite once.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from support import processes
from support.examples import ROOT

import squall

SENTENCES = 2000


def _supported_versions() -> list[str]:
    """`3.X` for every `Programming Language :: Python :: 3.X` classifier."""
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    found = (re.fullmatch(r"Programming Language :: Python :: (3\.\d+)", c)
             for c in meta["classifiers"])
    return [m.group(1) for m in found if m]


def _clean_env() -> dict[str, str]:
    """This process's environment without its virtual environment or import path (the suite's
    tags stay, so a process left behind is found), and with every pyenv version visible."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "PYTHONSAFEPATH")}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep)
                                  if not p.startswith(str(ROOT)))
    if shutil.which("pyenv") and "PYENV_VERSION" not in env:
        versions = subprocess.run(["pyenv", "versions", "--bare"], capture_output=True,
                                  text=True, timeout=30, env=env).stdout.split()
        if versions:
            env["PYENV_VERSION"] = ":".join(versions)
    return env


def _interpreter(version: str, env: dict[str, str]) -> str | None:
    """`python3.X` if it is on PATH and runs (a pyenv shim may be there without the version)."""
    if version == f"{sys.version_info.major}.{sys.version_info.minor}":
        return sys.executable
    path = shutil.which(f"python{version}", path=env["PATH"])
    if path is None:
        return None
    proc = subprocess.run([path, "-c", "import sys; print(sys.version_info[:2])"],
                          capture_output=True, text=True, timeout=60, env=env)
    return path if proc.returncode == 0 else None


@dataclass
class Built:
    wheel: Path
    sdist: Path
    log: str


@dataclass
class Installed:
    version: str
    venv: Path
    log: str
    returncode: int


def build(out: Path) -> Built:
    out.mkdir()
    # Without PYTHONDONTWRITEBYTECODE, which makes setuptools warn that it does not byte-compile.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    proc = subprocess.run([sys.executable, "-m", "build", "--outdir", str(out), str(ROOT)],
                          capture_output=True, text=True, timeout=300, cwd=out, env=env)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log
    (wheel,) = out.glob("squall-*.whl")
    (sdist,) = out.glob("squall-*.tar.gz")
    return Built(wheel, sdist, log)


@contextlib.contextmanager
def installed(built: Built, base: Path, versions: list[str]) -> Iterator[dict[str, Installed]]:
    """A fresh venv with the wheel in it per version of `versions` the machine has, made in
    parallel (each under its own process group, stopped whatever happens)."""
    env = _clean_env()
    base.mkdir()
    started: list[tuple[str, Path, subprocess.Popen]] = []
    try:
        for version in versions:
            python = _interpreter(version, env)
            if python is None:
                continue
            venv = base / f"py{version}"
            script = ('"$0" -m venv "$1" && "$1/bin/python" -m pip install --no-compile '
                      '--disable-pip-version-check -q "$2"')
            proc = processes.spawn(["bash", "-c", script, python, str(venv), str(built.wheel)],
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   text=True, env=env, cwd=base)
            started.append((version, venv, proc))
        done = {}
        for version, venv, proc in started:
            out, _ = proc.communicate(timeout=600)
            done[version] = Installed(version, venv, out, proc.returncode)
        yield done
    finally:
        for _, _, proc in started:
            processes.stop_group(proc)


def test_the_package_builds_installs_and_runs(tmp_path):
    """One build, its checks, then the wheel in a fresh venv of this interpreter's version."""
    built = build(tmp_path / "dist")
    _twine_accepts_it_without_warnings(built)
    _it_holds_the_package_data_and_the_metadata(built)
    this = f"{sys.version_info.major}.{sys.version_info.minor}"
    assert this in _supported_versions(), f"Python {this} is not among the classifiers"
    with installed(built, tmp_path / "venvs", [this]) as venvs:
        _the_wheel_runs_an_example(venvs[this], tmp_path)


@pytest.mark.long
def test_the_wheel_on_every_other_supported_version(tmp_path):
    """The same on every other supported version the machine has, the venvs made in parallel
    (`-m long`: about a minute and a half more on 2 cores)."""
    this = f"{sys.version_info.major}.{sys.version_info.minor}"
    others = [v for v in _supported_versions() if v != this]
    built = build(tmp_path / "dist")
    with installed(built, tmp_path / "venvs", others) as venvs:
        if not venvs:
            pytest.skip(f"none of Python {', '.join(others)} is on this machine")
        for version, inst in sorted(venvs.items()):
            run_dir = tmp_path / f"run{version}"
            run_dir.mkdir()
            _the_wheel_runs_an_example(inst, run_dir)
        print(f"tested on Python {', '.join(sorted(venvs))} (of {', '.join(others)})")


def _twine_accepts_it_without_warnings(built: Built) -> None:
    warnings = [line for line in built.log.splitlines()
                if re.search(r"deprecat|SetuptoolsWarning|^\s*WARNING", line, re.IGNORECASE)]
    assert warnings == [], "\n".join(warnings)
    proc = subprocess.run([sys.executable, "-m", "twine", "check", "--strict",
                           str(built.wheel), str(built.sdist)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert built.wheel.name == f"squall-{squall.__version__}-py3-none-any.whl"


def _it_holds_the_package_data_and_the_metadata(built: Built) -> None:
    with zipfile.ZipFile(built.wheel) as wheel:
        names = set(wheel.namelist())
        metadata = wheel.read(f"squall-{squall.__version__}.dist-info/METADATA").decode()
    static = ROOT / "src" / "squall" / "ui" / "static"
    for path in static.iterdir():
        assert f"squall/ui/static/{path.name}" in names
    for name in ("squall/py.typed", "squall/runtime/spark/log4j2.properties",
                 f"squall-{squall.__version__}.dist-info/licenses/LICENSE"):
        assert name in names
    assert not any(n.startswith(("tests/", "examples/", "benchmarks/")) for n in names)
    assert "License-Expression: Apache-2.0" in metadata
    assert "Requires-Python: >=3.11" in metadata
    for version in _supported_versions():
        assert f"Classifier: Programming Language :: Python :: {version}" in metadata


def _the_wheel_runs_an_example(inst: Installed, tmp_path: Path) -> None:
    version = inst.version
    assert inst.returncode == 0, inst.log
    env = _clean_env()
    bin_ = inst.venv / "bin"
    version_out = subprocess.run([str(bin_ / "squall"), "--version"], capture_output=True,
                                 text=True, timeout=60, env=env, cwd=tmp_path)
    assert version_out.stdout.strip() == f"squall {squall.__version__}", version_out.stderr

    # The package comes from the venv, not from the repository, and its page is there.
    where = subprocess.run(
        [str(bin_ / "python"), "-c",
         "import squall, sys; from squall.ui.server import static_file; "
         "assert b'<html' in static_file('index.html').lower(); "
         "print(squall.__file__); print('%d.%d' % sys.version_info[:2])"],
        capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path)
    assert where.returncode == 0, where.stderr
    file, py = where.stdout.split()
    assert Path(file).is_relative_to(inst.venv) and py == version

    shutil.copy(ROOT / "examples" / "wordcount.py", tmp_path / "wordcount.py")
    run = subprocess.run(
        [str(bin_ / "squall"), "run", "wordcount.py:topology", "--runner", "local",
         "-c", f"wordcount.sentences={SENTENCES}", "--name", f"wheel-test-{version}"],
        capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out
    assert re.search(r"word count: \d+ words, 27 distinct", out), out
    assert re.search(rf"sentences +spout .*acked={SENTENCES} +failed=0", out), out
    assert "errors reported: 0" in out
