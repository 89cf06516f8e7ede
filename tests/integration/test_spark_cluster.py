"""squall on a real Spark standalone cluster: a master and two workers on loopback.

One cluster serves the module (startup ~20 s, each application ~40-60 s on 2 cores). The word
count runs with `squall run --master spark://...` and with `squall submit`, and both must print
what the local runner prints. The `--dry-run` tests need no cluster.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shlex
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from support.spark_cluster import master_state, spark_home, standalone_cluster

pytestmark = [pytest.mark.cluster, pytest.mark.spark]

ROOT = Path(__file__).resolve().parents[2]
SQUALL = [sys.executable, "-m", "squall.cli.main"]
SENTENCES = 300


def squall(*args: str, timeout: float = 240, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([*SQUALL, *args], cwd=kwargs.pop("cwd", ROOT), capture_output=True,
                          text=True, timeout=timeout, **kwargs)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A standalone master and two 1-core workers; yields (master URL, web UI port, work dirs)."""
    with standalone_cluster(tmp_path_factory.mktemp("spark-cluster"), workers=2) as c:
        yield c.url, c.webui, c.work_dirs


def word_count(stdout: str) -> str:
    assert "word count:" in stdout, stdout
    return stdout.split("word count:")[1]


@pytest.fixture(scope="module")
def local_result() -> str:
    proc = squall("run", "examples/wordcount.py:topology", "--runner", "local",
                  "-c", f"wordcount.sentences={SENTENCES}", "--progress-every", "0")
    assert proc.returncode == 0, proc.stderr
    return word_count(proc.stdout)


def check_ran_on_cluster(proc, webui, work_dirs, apps_before, ckpt):
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-5000:]
    summary = proc.stderr.split("squall: summary")[1]
    assert f"acked={SENTENCES}" in summary and "errors reported: 0" in summary
    assert (ckpt / "commit.pkl").exists()
    # one more finished application, with executors on both workers
    apps = master_state(webui)["completedapps"]
    new = [a for a in apps if a["id"] not in apps_before]
    assert len(new) == 1 and new[0]["cores"] == 2, apps
    for work in work_dirs:
        assert (work / new[0]["id"]).is_dir(), f"no executor of {new[0]['id']} in {work}"


def cluster_args(url: str, ckpt: Path) -> list[str]:
    return ["examples/wordcount.py:topology", "--master", url,
            "-c", f"wordcount.sentences={SENTENCES}", "-c", "spark.executor.cores=1",
            "-c", "spark.cores.max=2", "--checkpoint", str(ckpt), "--progress-every", "5"]


@pytest.mark.spark
@pytest.mark.extended  # CI runs it after the default run
def test_run_on_standalone_cluster_matches_local_runner(cluster, local_result, tmp_path):
    url, webui, work_dirs = cluster
    before = {a["id"] for a in master_state(webui)["completedapps"]}
    proc = squall("run", *cluster_args(url, tmp_path / "ckpt"))
    check_ran_on_cluster(proc, webui, work_dirs, before, tmp_path / "ckpt")
    assert word_count(proc.stdout) == local_result


@pytest.mark.spark
@pytest.mark.extended  # CI runs it after the default run
def test_submit_to_standalone_cluster_matches_local_runner(cluster, local_result, tmp_path):
    url, webui, work_dirs = cluster
    before = {a["id"] for a in master_state(webui)["completedapps"]}
    proc = squall("submit", *cluster_args(url, tmp_path / "ckpt"))
    check_ran_on_cluster(proc, webui, work_dirs, before, tmp_path / "ckpt")
    assert "spark-submit --master " + url in proc.stderr
    # the driver's stderr (progress, summary) is relayed to stderr: stdout is the topology's
    assert word_count(proc.stdout) == local_result
    assert proc.stdout.startswith("word count:")


# ---- --dry-run: no cluster ------------------------------------------------------------------


def dry_run(*args: str, **kwargs) -> tuple[dict[str, str], list[str]]:
    proc = squall("submit", *args, "--dry-run", timeout=60, **kwargs)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 1, proc.stdout
    words = shlex.split(lines[0])
    env = {}
    while "=" in words[0] and not words[0].startswith("/"):
        key, _, value = words.pop(0).partition("=")
        env[key] = value
    return env, words


def test_submit_dry_run_prints_the_spark_submit_command(tmp_path):
    ckpt = tmp_path / "ckpt"
    env, argv = dry_run("examples/wordcount.py:topology", "--master", "spark://127.0.0.1:7077",
                        "-c", "wordcount.sentences=300", "-c", "spark.cores.max=2",
                        "-c", "spark.executor.cores=1", "--checkpoint", str(ckpt),
                        "--duration", "30")
    assert env == {"SPARK_HOME": str(spark_home()), "PYSPARK_PYTHON": sys.executable,
                   "PYSPARK_DRIVER_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    entry = Path(argv[argv.index("--py-files") + 2])
    assert entry.name == "submit_entry.py" and entry.is_file()
    assert argv[0] == str(spark_home() / "bin" / "spark-submit")
    wordcount = str(ROOT / "examples" / "wordcount.py")
    assert argv[1:] == [
        "--master", "spark://127.0.0.1:7077", "--deploy-mode", "client",
        "--conf", "spark.cores.max=2", "--conf", "spark.executor.cores=1",
        "--py-files", wordcount,
        str(entry), "run", f"{wordcount}:topology", "--runner", "spark",
        "--master", "spark://127.0.0.1:7077",
        "-c", "wordcount.sentences=300", "-c", "spark.cores.max=2",
        "-c", "spark.executor.cores=1", "--checkpoint", str(ckpt), "--duration", "30.0",
        "--name", "wordcount.topology",  # the name submit finds the driver by
    ]
    assert not ckpt.exists()  # nothing was run


def write_package(base: Path) -> None:
    (base / "mytopo" / "sub").mkdir(parents=True)
    (base / "mytopo" / "__init__.py").write_text("")
    (base / "mytopo" / "sub" / "__init__.py").write_text("")
    (base / "mytopo" / "sub" / "topo.py").write_text("def build():\n    pass\n")
    (base / "mytopo" / "__pycache__").mkdir()
    (base / "mytopo" / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"")


def test_submit_dry_run_zips_a_local_package(tmp_path):
    write_package(tmp_path)
    env, argv = dry_run("mytopo.sub.topo:build", "--master", "spark://cluster.example:7077",
                        cwd=tmp_path, env=dict(os.environ, PYTHONPATH=str(tmp_path)))
    assert "SPARK_LOCAL_IP" not in env  # a remote cluster must reach the driver
    shipped = Path(argv[argv.index("--py-files") + 1])
    assert shipped.suffix == ".zip" and shipped.name.startswith("mytopo-")
    assert argv[argv.index("run") + 1] == "mytopo.sub.topo:build"

    from squall.cli import submit

    sys.path.insert(0, str(tmp_path))
    try:
        args = argparse.Namespace(target="mytopo.sub.topo:build", master="local[2]", conf=[],
                                  checkpoint=None, duration=None, progress_every=None,
                                  deploy_mode="client")
        cmd, _, prepare = submit.build_command(args)
    finally:
        sys.path.remove(str(tmp_path))
    assert cmd[cmd.index("--py-files") + 1] == str(shipped)  # named by content: the same zip
    prepare()
    with zipfile.ZipFile(shipped) as zf:
        assert sorted(zf.namelist()) == ["mytopo/__init__.py", "mytopo/sub/__init__.py",
                                         "mytopo/sub/topo.py"]


def test_submit_errors_exit_2(tmp_path, monkeypatch, capsys):
    proc = squall("submit", "no_such_module_xyz:topology", "--master", "local", timeout=60)
    assert proc.returncode == 2 and "cannot import module 'no_such_module_xyz'" in proc.stderr
    proc = squall("submit", "examples/missing.py:topology", "--master", "local", timeout=60)
    assert proc.returncode == 2 and "no such file" in proc.stderr
    proc = squall("submit", "examples/wordcount.py", "--master", "local", timeout=60)
    assert proc.returncode == 2 and "module:attribute" in proc.stderr
    proc = squall("submit", "examples/wordcount.py:topology", timeout=60)
    assert proc.returncode == 2 and "--master" in proc.stderr

    # a pyspark without bin/spark-submit
    from importlib.machinery import ModuleSpec

    from squall.cli.main import main

    real = importlib.util.find_spec

    def find_spec(name, *args):
        if name == "pyspark":
            spec = ModuleSpec("pyspark", None, is_package=True)
            spec.submodule_search_locations = [str(tmp_path)]
            return spec
        return real(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    monkeypatch.chdir(ROOT)
    code = main(["submit", "examples/wordcount.py:topology", "--master", "local",
                 "--dry-run"])
    assert code == 2
    assert "spark-submit not found" in capsys.readouterr().err
