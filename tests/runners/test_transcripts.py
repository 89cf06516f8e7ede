"""Window and pane scenarios written once as data (`tests/transcripts/*.json`), run three ways.

Each transcript (schema: `tests/transcripts/README.md`) configures a Storm window
(`"core": "tuple_windows"`) or a Beam/Apex windowed operator (`"core": "panes"`), lists its input
steps, and gives after each step exactly what it produces. It runs

- on the core directly (`squall.tuple_windows.WindowManager` or `squall.panes.engine
  .WindowedEngine`), step by step, once as is and once with a pickle round trip of the core after
  every step (as the Spark runner snapshots its tasks), comparing every step's output and the core
  state the transcript names;
- through a topology (a scripted spout -> `WindowedBolt` or `KeyedWindowedOperator`) on the
  runners its `"runners"` list names: `local` on simulated time, `spark` (all Spark transcripts in
  one topology, run once per module). A topology sees only what the components emit, so there
  the expected output is the concatenation of the steps' outputs, in order: one spout task feeds
  one window task, so the order is total, and no comparison ignores order.

Processing-time transcripts depend on when tuples, ticks and batch ends arrive, which only the
core (time given per step) and the local runner (simulated clock) control; they list no `spark`.

Pane transcripts with Apex's trigger option run on the engine a second time with the option
expressed in Beam's trigger model (`TriggerOption.as_trigger()`, the engine's general trigger
driver): the same panes. Transcripts marked `"batch_cuts": true` also run on Spark with one tuple
per micro-batch.
"""

from __future__ import annotations

import ast
import json
import pickle
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from squall import Count, Duration, Fields, TopologyBuilder, Values, WindowedBolt
from squall.components.side_records import RECORD_FIELDS
from squall.panes import beam_triggers
from squall.panes.beam_triggers import processing_delays
from squall.testing import FixedTupleSpout, complete_topology, current_clock, simulated_time
from squall.tuple_windows import Activation, Expired, Late, WindowManager, WindowSpec
from squall.windows import (
    WATERMARK_STREAM,
    AccumulationMode,
    ClosingBehavior,
    GlobalWindow,
    KeyedWindowedOperator,
    OnTimeBehavior,
    SessionWindows,
    TimestampCombiner,
    TimeWindows,
    Trigger,
    TriggerOption,
    WindowedEngine,
    accumulations,
)

HERE = Path(__file__).resolve().parents[1] / "transcripts"
CORES = ("tuple_windows", "panes")
RUNNERS = ("core", "local", "spark")
STEP_KINDS = {"tuple_windows": ("add", "tick", "end"),
              "panes": ("tuple", "watermark", "batch_end", "end")}
OUTPUTS = {"tuple_windows": ("windows", "acked", "late"), "panes": ("panes", "dropped")}
STATE_KEYS = {"tuple_windows": ("watermark", "queued", "late_count"),
              "panes": ("windows", "sessions", "watermark", "dropped", "purge_heap",
                        "closed_drops")}
# The operator's keys besides window, accumulation, trigger and allowed lateness: the engine's
# options (Beam's windowing strategy) and whether panes carry their pane info.
OPERATOR_KEYS = {"window", "accumulation", "trigger", "allowed_lateness_ms", "accumulation_mode",
                 "on_time_behavior", "closing_behavior", "timestamp_combiner", "pane_info"}
TRIGGER_NAMES = {name: getattr(beam_triggers, name) for name in (
    "AfterWatermark", "AfterCount", "AfterProcessingTime", "Repeatedly", "AfterAny", "AfterAll",
    "AfterEach", "OrFinally", "Never", "Always")}
# Message timeout well above every window's length (the runners check it); few Spark partitions.
BASE_CONF: dict[str, Any] = {"topology.message.timeout.secs": 120,
                             "spark.sql.shuffle.partitions": 2}
LATE_STREAM = "late"


def parse_trigger(text: str) -> Trigger:
    """A trigger of Beam's model written as Python (`AfterWatermark(early=AfterCount(2))`):
    calls of the trigger classes with int arguments, nothing else."""
    def build(node: ast.expr) -> Any:
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id in TRIGGER_NAMES:
            return TRIGGER_NAMES[node.func.id](*[build(a) for a in node.args],
                                               **{k.arg: build(k.value) for k in node.keywords
                                                  if k.arg is not None})
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        raise ValueError(f"not a trigger expression: {ast.unparse(node)}")

    return build(ast.parse(text, mode="eval").body)  # type: ignore[no-any-return]


# ---- loading -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Transcript:
    """One scenario as read from its file, checked against the schema on load."""

    name: str
    path: Path
    data: dict[str, Any]

    @property
    def core(self) -> str:
        return str(self.data["core"])

    @property
    def steps(self) -> list[dict[str, Any]]:
        return list(self.data["steps"])

    @property
    def runners(self) -> tuple[str, ...]:
        return tuple(self.data["runners"])

    @property
    def processing_time(self) -> bool:
        """Whether results depend on processing time (ticks, batch ends, arrival times)."""
        if self.core == "tuple_windows":
            return not self.data["window"].get("event_time", False)
        trigger = self.data["operator"].get("trigger", {})
        if isinstance(trigger, str):
            return bool(processing_delays(parse_trigger(trigger)))
        return any(isinstance(trigger.get(k), dict) for k in ("early", "late"))

    @property
    def width(self) -> int:
        """The fields of a pane as the transcript writes them: 11 with pane info, else 7."""
        return 11 if self.data.get("operator", {}).get("pane_info") else 7

    def kind(self, step: dict[str, Any]) -> str:
        (kind,) = [k for k in STEP_KINDS[self.core] if k in step]
        return kind


def _check(t: Transcript) -> None:
    """Schema errors fail loudly at collection, naming the transcript."""
    d = t.data
    for key in ("name", "core", "why", "runners", "steps"):
        assert key in d, f"{t.name}: no {key!r}"
    assert t.core in CORES, f"{t.name}: core must be one of {CORES}"
    config = "window" if t.core == "tuple_windows" else "operator"
    allowed_top = {"name", "core", "why", "runners", "runners_note", "steps", "local_batch_ms",
                   "batch_cuts", config, *(("streams",) if config == "window" else ())}
    assert set(d) <= allowed_top, f"{t.name}: unknown keys {set(d) - allowed_top}"
    assert config in d, f"{t.name}: no {config!r}"
    assert "core" in t.runners and set(t.runners) <= set(RUNNERS), (
        f"{t.name}: runners must include 'core' and be among {RUNNERS}")
    assert not (t.processing_time and "spark" in t.runners), (
        f"{t.name}: a processing-time transcript cannot run on Spark (its clock is real)")
    assert not d.get("batch_cuts") or "spark" in t.runners, f"{t.name}: batch cuts need Spark"
    if t.core == "panes":
        op = d["operator"]
        assert set(op) <= OPERATOR_KEYS, f"{t.name}: operator keys {set(op) - OPERATOR_KEYS}?"
        trigger = op.get("trigger", {})
        if isinstance(trigger, str):
            # Written as the trigger prints itself, so the file reads as the code would.
            assert repr(parse_trigger(trigger)) == trigger, (
                f"{t.name}: write the trigger as {parse_trigger(trigger)!r}")
        else:
            assert "accumulation_mode" not in op, f"{t.name}: the Apex option has its mode"
        for i, step in enumerate(t.steps):
            for pane in step.get("panes", []):
                assert len(pane) == t.width, f"{t.name} step {i}: panes have {t.width} fields"
    allowed = {*STEP_KINDS[t.core], *OUTPUTS[t.core], "now", "ts", "stream", "state", "note"}
    for i, step in enumerate(t.steps):
        kinds = [k for k in STEP_KINDS[t.core] if k in step]
        assert len(kinds) == 1, f"{t.name} step {i}: one of {STEP_KINDS[t.core]}"
        assert set(step) <= allowed, f"{t.name} step {i}: unknown keys {set(step) - allowed}"
        assert set(step.get("state", {})) <= set(STATE_KEYS[t.core]), f"{t.name} step {i}"
    if set(t.runners) - {"core"}:
        # A runner always ends the input, once, after everything else.
        ends = [i for i, s in enumerate(t.steps) if "end" in s]
        assert ends == [len(t.steps) - 1], f"{t.name}: a runner transcript ends with 'end' once"
    if "local" in t.runners and t.processing_time:
        # The local runner ends the input as soon as the last tuple is in, and ends a batch
        # every `local_batch_ms` from the start: the transcript must say the same.
        inputs = [s.get("now", 0) for s in t.steps if "add" in s or "tuple" in s]
        end = t.steps[-1]["end"]
        assert end == inputs[-1], f"{t.name}: input ends with its last tuple, at {inputs[-1]}"
        if t.core == "panes":
            every = t.data["local_batch_ms"]
            batch_ends = [s["batch_end"] for s in t.steps if "batch_end" in s]
            assert batch_ends == list(range(every, end + 1, every)), (
                f"{t.name}: batch_end steps must be the local runner's, every {every} ms")


def load_transcripts() -> list[Transcript]:
    out: list[Transcript] = []
    for path in sorted(HERE.glob("*.json")):
        raw = json.loads(path.read_text())
        for d in raw.get("scenarios", [raw]):
            t = Transcript(d["name"], path, d)
            _check(t)
            out.append(t)
    names = [t.name for t in out]
    assert len(names) == len(set(names)), "transcript names must be unique"
    return out


TRANSCRIPTS = load_transcripts()


# ---- building what a transcript configures -----------------------------------------------------

def _measure(m: dict[str, int]) -> Count | Duration:
    return Count(m["count"]) if "count" in m else Duration(m["ms"])


def window_spec(w: dict[str, Any]) -> WindowSpec:
    return WindowSpec(_measure(w["length"]), _measure(w.get("slide", {"count": 1})),
                      event_time=w.get("event_time", False), lag_ms=w.get("lag_ms", 0),
                      watermark_interval_ms=w.get("watermark_interval_ms", 1000))


def window_option(w: dict[str, Any]) -> GlobalWindow | TimeWindows | SessionWindows:
    if "global" in w:
        return GlobalWindow()
    if "session_gap_ms" in w:
        return SessionWindows(Duration(w["session_gap_ms"]))
    tw = TimeWindows(Duration(w["time_ms"]))
    return tw.slide_by(Duration(w["slide_ms"])) if "slide_ms" in w else tw


def trigger_option(t: dict[str, Any]) -> TriggerOption:
    trigger = TriggerOption.at_watermark() if t.get("on_time", True) else TriggerOption()
    trigger = getattr(trigger, f"{t.get('mode', 'discarding')}_fired_panes")()
    for when in ("early", "late"):
        every = t.get(when)
        if every is not None:
            period = Duration(every["ms"]) if isinstance(every, dict) else every
            trigger = getattr(trigger, f"with_{when}_firings_at_every")(period)
    return trigger.fire_only_updated_panes() if t.get("only_updated") else trigger


def operator_parts(op: dict[str, Any], apex_as_model: bool = False
                   ) -> tuple[Any, accumulations.Accumulation, TriggerOption | Trigger,
                              int | None]:
    """Window, accumulation, trigger and lateness (`apex_as_model`: an Apex option as
    `TriggerOption.as_trigger()`, run by the engine's general trigger driver)."""
    spec = op.get("trigger", {})
    trigger: TriggerOption | Trigger
    if isinstance(spec, str):
        trigger = parse_trigger(spec)
    else:
        trigger = trigger_option(spec)
        if apex_as_model:
            trigger = trigger.as_trigger()
    return (window_option(op["window"]), getattr(accumulations, op["accumulation"])(), trigger,
            op.get("allowed_lateness_ms"))


def operator_options(op: dict[str, Any]) -> dict[str, Any]:
    """The engine's options the transcript sets (Beam's windowing strategy)."""
    out: dict[str, Any] = {}
    if "accumulation_mode" in op:
        out["mode"] = AccumulationMode(op["accumulation_mode"])
    for key, kind in (("on_time_behavior", OnTimeBehavior), ("closing_behavior", ClosingBehavior),
                      ("timestamp_combiner", TimestampCombiner)):
        if key in op:
            out[key] = kind(op[key])
    return out


# ---- (a) the cores ------------------------------------------------------------------------------

def _window_step(m: WindowManager, step: dict[str, Any], stream: tuple[str, str]
                 ) -> dict[str, Any]:
    if "add" in step:
        actions = m.add(step["add"], step.get("now", 0), ts=step.get("ts"), stream=stream)
    elif "tick" in step:
        actions = m.tick(step["tick"])
    else:
        actions = m.end_of_input(step["end"])
    out: dict[str, Any] = {
        "windows": [[a.window.start_timestamp, a.window.end_timestamp, a.window.get(),
                     a.window.get_new(), a.window.get_expired()]
                    for a in actions if isinstance(a, Activation)],
        "acked": [e for a in actions if isinstance(a, Expired) for e in a.events],
        "late": [{"watermark": a.watermark} for a in actions if isinstance(a, Late)],
    }
    if out["late"]:
        (out["late"],) = out["late"]  # one add is late or not
    return {k: v for k, v in out.items() if v}


def _window_state(m: WindowManager) -> dict[str, Any]:
    return {"watermark": m.watermark, "queued": list(m.events), "late_count": m.late_count}


def _pane_step(e: WindowedEngine, step: dict[str, Any], width: int = 7) -> dict[str, Any]:
    """One step on the engine; its panes cut to `width` fields (7: without pane info)."""
    out: dict[str, Any] = {}
    if "tuple" in step:
        key, ts, value = step["tuple"]
        if not e.process(key, ts, value, step.get("now", 0)):
            out["dropped"] = True
    elif "watermark" in step:
        e.advance(step["watermark"], step.get("now", 0))
    elif "batch_end" in step:
        e.batch_end(step["batch_end"])
    else:
        e.end_of_input(step["end"])
    panes = [list(p[:width]) for p in e.take()]
    if panes:
        out["panes"] = panes
    return out


def _pane_state(e: WindowedEngine) -> dict[str, Any]:
    return {"windows": sorted(list(w) for w in e.windows),
            "sessions": {k: [list(w) for w in v] for k, v in e.sessions.items()},
            "watermark": e.watermark, "dropped": e.dropped,
            "purge_heap": sorted(list(w) for w in e.purge_heap), "closed_drops": e.closed_drops}


def run_core(t: Transcript, snapshot_every_step: bool, apex_as_model: bool = False) -> None:
    """Drive the core step by step; every step's output and named state exactly as written."""
    core: Any
    step_fn: Callable[[Any, dict[str, Any]], dict[str, Any]]
    state_fn: Callable[[Any], dict[str, Any]]
    if t.core == "tuple_windows":
        streams = t.data.get("streams", ["default"])
        core = WindowManager(window_spec(t.data["window"]), streams=[("src", s) for s in streams])

        def step_fn(m: Any, s: dict[str, Any]) -> dict[str, Any]:
            return _window_step(m, s, ("src", s.get("stream", "default")))

        state_fn = _window_state
    else:
        op = t.data["operator"]
        core = WindowedEngine(*operator_parts(op, apex_as_model), **operator_options(op))

        def step_fn(e: Any, s: dict[str, Any]) -> dict[str, Any]:
            return _pane_step(e, s, t.width)

        state_fn = _pane_state
    for i, step in enumerate(t.steps):
        got = step_fn(core, step)
        want = {k: step[k] for k in OUTPUTS[t.core] if k in step}
        assert got == want, f"{t.name} step {i} {step}"
        if "state" in step:
            state = state_fn(core)
            assert {k: state[k] for k in step["state"]} == step["state"], f"{t.name} step {i}"
        if snapshot_every_step:
            core = pickle.loads(pickle.dumps(core))


@pytest.mark.parametrize("transcript", TRANSCRIPTS, ids=lambda t: t.name)
@pytest.mark.parametrize("snapshots", [False, True], ids=["plain", "pickled-each-step"])
def test_core(transcript: Transcript, snapshots: bool) -> None:
    run_core(transcript, snapshots)


APEX = [t for t in TRANSCRIPTS
        if t.core == "panes" and not isinstance(t.data["operator"].get("trigger", {}), str)]


@pytest.mark.parametrize("transcript", APEX, ids=lambda t: t.name)
def test_apex_option_expressed_in_beams_model(transcript: Transcript) -> None:
    """Apex's TriggerOption as a trigger of Beam's model (the engine's general trigger driver)
    gives the panes its inlined rules give: every Apex transcript, step by step."""
    run_core(transcript, snapshot_every_step=True, apex_as_model=True)


# ---- (b, c) topologies --------------------------------------------------------------------------

class ScriptSpout(FixedTupleSpout):
    """Emits a transcript's input in step order from one task.

    Rows are (stream, values, at_ms): data tuples are tracked with their position among data
    tuples as message id, watermarks go out untracked on `_watermark` (operators do not ack
    control tuples). With `at_ms` (processing time, local runner only) a row waits until the
    simulated clock reaches it. Acks and fails are recorded as `FixedTupleSpout` does.
    """

    def __init__(self, rows: list[tuple[str, list[Any], int | None]],
                 fields: dict[str, list[str]]) -> None:
        super().__init__({s: [] for s in fields}, fields)
        self.rows = rows

    def open(self, conf, context, collector) -> None:
        super().open(conf, context, collector)
        self.position = 0
        self.next_id = 0

    def next_tuple(self) -> None:
        if self.position >= len(self.rows):
            return
        stream, values, at = self.rows[self.position]
        if at is not None:
            clock = current_clock()
            assert clock is not None, "timed rows need the simulated clock"
            if clock.now_ms() < at:
                return
        self.position += 1
        if stream == WATERMARK_STREAM:
            self.collector.emit(values, stream=stream)
        else:
            self.collector.emit(values, msg_id=self.next_id, stream=stream)
            self.next_id += 1

    def is_exhausted(self) -> bool:
        return self.position >= len(self.rows)


class Describe(WindowedBolt):
    """Emits each window as [start, end, values, new values, expired values] (field `v`)."""

    def prepare(self, conf, context, collector) -> None:
        self.collector = collector

    def execute(self, window) -> None:
        def vals(tuples: list) -> list:
            return [t["v"] for t in tuples]

        self.collector.emit(Values(window.start_timestamp, window.end_timestamp,
                                   vals(window.get()), vals(window.get_new()),
                                   vals(window.get_expired())))

    def declare_output_fields(self, declarer) -> None:
        declarer.declare(Fields("start", "end", "values", "new", "expired"))


@dataclass
class Expected:
    """What a topology run must show: the window task's output in order, the late tuples, and
    every data tuple acked exactly once (message ids 0..inputs-1)."""

    rows: list[list[Any]]
    late: list[list[Any]]
    inputs: int


def add_to(b: TopologyBuilder, t: Transcript, spout: str, bolt: str, timed: bool) -> Expected:
    """Add the transcript's spout and window component to `b`; what they must produce."""
    rows: list[tuple[str, list[Any], int | None]] = []
    out: list[list[Any]] = []
    late: list[list[Any]] = []
    for step in t.steps:
        kind = t.kind(step)
        at = step.get("now", 0) if timed else None
        if kind == "add":
            values = [step["add"], step.get("ts")]
            rows.append((step.get("stream", "default"), values, at))
            if "late" in step:
                late.append(values)
        elif kind == "tuple":
            rows.append(("default", list(step["tuple"]), at))
            if step.get("dropped"):
                late.append(list(step["tuple"]))
        elif kind == "watermark":
            rows.append((WATERMARK_STREAM, [step["watermark"]], at))
        out += step.get("windows", []) + step.get("panes", [])
    inputs = sum(1 for s, _v, _a in rows if s != WATERMARK_STREAM)
    if t.core == "tuple_windows":
        streams = t.data.get("streams", ["default"])
        b.set_spout(spout, ScriptSpout(rows, {s: ["v", "ts"] for s in streams}))
        w = t.data["window"]
        slide = w.get("slide")
        component = Describe().with_window(_measure(w["length"]),
                                           None if slide is None else _measure(slide))
        if w.get("event_time"):
            component = (component.with_timestamp_field("ts")
                         .with_lag(Duration(w.get("lag_ms", 0)))
                         .with_watermark_interval(Duration(w.get("watermark_interval_ms", 1000)))
                         .with_late_tuple_stream(LATE_STREAM))
        declarer = b.set_bolt(bolt, component)
        for s in streams:
            declarer.shuffle_grouping(spout, s)
    else:
        fields = {"default": ["key", "ts", "value"], WATERMARK_STREAM: ["watermark"]}
        b.set_spout(spout, ScriptSpout(rows, fields))
        op = t.data["operator"]
        window, acc, trigger, lateness = operator_parts(op)
        options = operator_options(op)
        b.set_bolt(bolt, KeyedWindowedOperator(
            window=window, accumulation=acc, trigger=trigger,
            allowed_lateness=None if lateness is None else Duration(lateness),
            late_stream=LATE_STREAM, timestamp_field="ts", key_field="key", value_field="value",
            accumulation_mode=options.pop("mode", None), pane_info=bool(op.get("pane_info")),
            **options,
        )).shuffle_grouping(spout)  # the `_watermark` subscription is implicit
    return Expected(out, late, inputs)


def check_run(result: Any, t: Transcript, spout: str, bolt: str, expected: Expected) -> None:
    assert [list(r) for r in result.tuples(bolt)] == expected.rows, t.name
    # A late record: the tuple's fields, then origin, event time, watermark and reason.
    # (Processing time has no late stream.)
    late_spec = result.topology.components[bolt].streams.get(LATE_STREAM)
    n = 0 if late_spec is None else len(late_spec.fields) - len(RECORD_FIELDS)
    got_late = [list(late[:n]) for late in result.tuples(bolt, LATE_STREAM)]
    assert all(late[-1] == "late" for late in result.tuples(bolt, LATE_STREAM)), t.name
    assert got_late == expected.late, t.name
    assert sorted(result.acked(spout)) == list(range(expected.inputs)), t.name
    assert result.failed(spout) == [], t.name


def run_local(t: Transcript) -> None:
    b = TopologyBuilder()
    expected = add_to(b, t, "src", "win", timed=t.processing_time)
    # Processing-time transcripts give their batch length: their `batch_end` steps (operators)
    # are the local runner's batch ends.
    conf = {**BASE_CONF, "squall.local.batch.ms": t.data.get("local_batch_ms", 1000)}
    with simulated_time():
        result = complete_topology(b.create_topology(), conf)
    assert result.errors == [], t.name
    check_run(result, t, "src", "win", expected)


SPARK = [t for t in TRANSCRIPTS if "spark" in t.runners]
CUTS = [t for t in SPARK if t.data.get("batch_cuts")]
# One tuple (or watermark) per Spark micro-batch: the cut that differs most from whole input.
ONE_TUPLE = {"squall.spark.batch.max.tuples": 1}
_SPARK_RUN: dict[str, tuple[Any, dict[str, Expected]]] = {}


def spark_run(cut: str = "spark") -> tuple[Any, dict[str, Expected]]:
    """All Spark transcripts (`cut` "spark-1tuple": those with batch cuts, one tuple per
    micro-batch) in one topology, one spout and one window task each, run once per module."""
    if cut not in _SPARK_RUN:
        b = TopologyBuilder()
        chosen = SPARK if cut == "spark" else CUTS
        expected = {t.name: add_to(b, t, f"src{i}", f"win{i}", timed=False)
                    for i, t in enumerate(chosen)}
        conf = BASE_CONF if cut == "spark" else {**BASE_CONF, **ONE_TUPLE}
        _SPARK_RUN[cut] = (complete_topology(b.create_topology(), conf, runner="spark"),
                           expected)
    return _SPARK_RUN[cut]


CASES = [pytest.param(r, t, id=f"{t.name}-{r}", marks=[pytest.mark.spark] if r == "spark" else [])
         for t in TRANSCRIPTS for r in t.runners if r != "core"]
# The one-tuple cut runs in CI's second run (`extended`): the suite's budget.
CASES += [pytest.param("spark-1tuple", t, id=f"{t.name}-spark-1tuple",
                       marks=[pytest.mark.spark, pytest.mark.extended]) for t in CUTS]


@pytest.mark.parametrize("runner,transcript", CASES, indirect=["runner"])
def test_on_runner(runner: str, transcript: Transcript, request: pytest.FixtureRequest) -> None:
    if runner == "local":
        run_local(transcript)
        return
    cut = request.node.callspec.params["runner"]
    result, expected = spark_run(cut)
    assert result.errors == []
    i = (SPARK if cut == "spark" else CUTS).index(transcript)
    check_run(result, transcript, f"src{i}", f"win{i}", expected[transcript.name])


def test_every_transcript_says_why_and_covers_a_runner_where_it_can() -> None:
    """Event-time and count transcripts run on both runners unless they say why not."""
    for t in TRANSCRIPTS:
        assert len(t.data["why"]) > 20, t.name
        if not t.processing_time and "spark" not in t.runners:
            assert "runners_note" in t.data, f"{t.name}: why not on Spark?"
