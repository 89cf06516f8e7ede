"""`squall run` as a user runs it: a subprocess, real time, output on the terminal."""

from __future__ import annotations

import os
import subprocess

import pytest
from support.cli import SQUALL, squall
from support.examples import ROOT

# Each test runs `squall run` in subprocesses of its own: they may go to different workers.
pytestmark = pytest.mark.spread


def test_run_wordcount_file_target_prints_progress_result_and_summary():
    proc = squall("run", "examples/wordcount.py:topology", "--runner", "local",
                  "-c", "wordcount.sentences=3000", "--progress-every", "0.05")
    assert proc.returncode == 0, proc.stderr
    # Named after the file and the attribute, not the attribute alone (every example's
    # topology is called `topology`).
    assert "squall: running examples/wordcount.py:topology as 'wordcount.topology'" in proc.stderr
    assert "word count:" in proc.stdout
    total = int(proc.stdout.split("word count: ")[1].split(" words")[0])
    assert total > 3000 * 5
    # live progress lines, then the summary with every component
    assert proc.stderr.count("sentences        spout x2") >= 2
    summary = proc.stderr.split("squall: summary")[1]
    for component in ("count", "report", "sentences", "split"):
        assert component in summary
    assert "acked=3000" in summary
    assert "errors reported: 0" in summary


def test_run_module_target_with_duration_stops_an_unbounded_topology(tmp_path):
    (tmp_path / "endless.py").write_text(
        "from squall import TopologyBuilder, Spout, Fields, Values\n"
        "class Forever(Spout):\n"
        "    def open(self, conf, context, collector):\n"
        "        super().open(conf, context, collector); self.i = 0\n"
        "    def next_tuple(self):\n"
        "        self.i += 1; self.collector.emit(Values(self.i), msg_id=self.i)\n"
        "    def declare_output_fields(self, d): d.declare(Fields('n'))\n"
        "def build():\n"
        "    b = TopologyBuilder(); b.set_spout('forever', Forever())\n"
        "    return b.create_topology(), {'topology.max.spout.pending': 10}\n"
    )
    proc = subprocess.run(
        [*SQUALL, "run", "endless:build", "--runner", "local", "--duration", "0.5",
         "--progress-every", "0"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60,
        env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 0, proc.stderr
    assert "forever          spout x1" in proc.stderr
    emitted = int(proc.stderr.split("emitted=")[-1].split()[0])
    assert emitted > 10


def test_config_overrides_are_parsed_as_json():
    from squall.cli.target import parse_overrides

    assert parse_overrides(["a=1", "b=true", "c=text", "d=null", "e=1.5"]) == {
        "a": 1, "b": True, "c": "text", "d": None, "e": 1.5,
    }


def test_bad_targets_give_clear_errors():
    proc = squall("run", "examples/wordcount.py")
    assert proc.returncode == 2 and "module:attribute" in proc.stderr
    proc = squall("run", "examples/missing.py:topology")
    assert proc.returncode == 2 and "no such file" in proc.stderr
    proc = squall("run", "examples/wordcount.py:nothing")
    assert proc.returncode == 2 and "has no attribute 'nothing'" in proc.stderr
    proc = squall("run", "examples/wordcount.py:SENTENCES")
    assert proc.returncode == 2 and "must be a Topology" in proc.stderr
    proc = squall("run", "no_such_module_xyz:topology")
    assert proc.returncode == 2 and "cannot import module" in proc.stderr
    proc = squall("run", "examples/wordcount.py:topology", "--runner", "storm")
    assert proc.returncode == 2 and "invalid choice" in proc.stderr


@pytest.mark.spark
def test_main_job_runs_on_spark_by_default_with_progress_and_result(tmp_path):
    """The README's main command (Spark local mode by default), on a small input."""
    proc = squall("run", "examples/wordcount.py:topology", "-c", "wordcount.sentences=600",
                  "-c", "spark.master=local[2]", "--checkpoint", str(tmp_path / "ckpt"),
                  timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "on the spark runner" in proc.stderr
    local = squall("run", "examples/wordcount.py:topology", "--runner", "local",
                   "-c", "wordcount.sentences=600", "--progress-every", "0")
    # identical result on both runners: the total and the top ten
    assert proc.stdout.split("word count:")[1] == local.stdout.split("word count:")[1]
    summary = proc.stderr.split("squall: summary")[1]
    assert "acked=600" in summary and "errors reported: 0" in summary
    assert (tmp_path / "ckpt" / "commit.pkl").exists()


def test_bad_checkpoints_configurations_and_masters_are_refused_in_one_line_before_spark(
        tmp_path):
    """Exit 2 and one line saying what to fix, before Spark starts (its log is not even
    routed) and before the local runner starts."""
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    cases = [
        (["--checkpoint", str(a_file)], f"checkpoint location {a_file} is a file"),
        (["--checkpoint", str(a_file / "sub")], f"{a_file} is a file, not a directory"),
        # Root may write anywhere but in /sys: the permission case whoever runs the suite.
        (["--checkpoint", "/sys/squall-checkpoint"], "no permission to write in /sys"),
        (["-c", 'topology.state.provider.config={"dir": 5}'],
         "topology.state.provider.config: 'dir' must be a directory (a non-empty string), got 5"),
        (["--master", "sprak://127.0.0.1:7077"],
         "master 'sprak://127.0.0.1:7077' is not a Spark master URL"),
    ]
    for runner in ("spark", "local"):
        for extra, message in cases:
            if runner == "local" and "--master" in extra:
                continue  # refused as --master applies to the spark runner (tested elsewhere)
            proc = squall("run", "examples/wordcount.py:topology", "--runner", runner, *extra)
            assert proc.returncode == 2, (runner, extra, proc.stderr)
            lines = proc.stderr.strip().splitlines()
            assert len(lines) == 1 and lines[0].startswith("squall run: "), (runner, lines)
            assert message in lines[0], (runner, lines)
    assert not (tmp_path / "a-file").is_dir() and not list(tmp_path.glob("a-file*/**"))


@pytest.mark.spark
def test_submit_keeps_sparks_log_lines_off_the_terminal_as_run_does(tmp_path):
    """`squall submit` (through spark-submit, local[2]) of Storm's TridentWordCount: Spark's
    INFO lines go to a log file, the terminal has squall's lines, the progress and the summary."""
    env = dict(os.environ, SQUALL_LOG_DIR=str(tmp_path / "logs"),
               SQUALL_RUN_DIR=str(tmp_path / "run"))
    proc = subprocess.run(
        [*SQUALL, "submit", "examples/trident_wordcount.py:topology", "--master", "local[2]",
         "--checkpoint", str(tmp_path / "ckpt")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "errors reported: 0" in proc.stderr.split("squall: summary")[1]
    assert "trident_wordcount: 'cat the dog jumped' ->" in proc.stdout
    noise = [line for line in proc.stderr.splitlines()
             if " INFO " in line or " WARN " in line or line.startswith("\tat ")]
    assert noise == [], "\n".join(noise[:20])
    logs = {p.name: p.read_text() for p in (tmp_path / "logs").iterdir()}
    (submit_log,) = [text for name, text in logs.items() if "-submit-" in name]
    assert " INFO " in submit_log and "SparkContext" in submit_log
    assert f"spark-submit's own output (the driver's JVM) goes to {tmp_path / 'logs'}" \
        in proc.stderr
