"""Records as memfine writes them (results.jsonl, train.jsonl, predict --json), read strictly through
the one record schema (schema.json: `memfine schema --json`, which a test holds to the C++
declaration), and strategies picked by their registered name, role and parameters, never by a
label's spelling."""
import csv
import json
import math
import os
import re

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
DATA = os.path.join(ROOT, "experiments", "data")
MIB = 2.0 ** 20


class ResultsError(Exception):
    pass


with open(os.path.join(HERE, "schema.json")) as _f:
    SCHEMA = json.load(_f)
FIELDS = SCHEMA["fields"]  # key -> {type, unit, meaning, kinds}
COUNTERS = {}  # a strategy's counter key -> its declaration (the first strategy's that declares it)
for _name, _counters in sorted(SCHEMA["counters"].items()):
    for _k, _v in _counters.items():
        COUNTERS.setdefault(_k, _v)


PROJECTION = SCHEMA.get("projection", {})  # memfine project --json's fields
KNOWN = set(SCHEMA["strategies"])  # the strategies this checkout registers


def field(key, name=None):
    """A key's declaration: a record field's, or a strategy counter's (strategy `name`'s where
    given); None for neither."""
    if key in FIELDS:
        return FIELDS[key]
    if name is not None:
        return SCHEMA["counters"].get(name, {}).get(key)
    return COUNTERS.get(key)


def unit(key):
    """The unit the schema gives a key ('bytes', 'ms', ...; '' none)."""
    f = field(key)
    return f["unit"] if f else ""


def _finite(value):
    try:
        return math.isfinite(float(value))
    except OverflowError:  # an integer beyond any double
        return False


def _a_result(value, measured):
    """A number that is a result: finite, and not negative where it has a unit; within objects and
    lists alike (the C++ readers' rule, core/record/schema.cpp)."""
    if isinstance(value, bool):
        return True
    if isinstance(value, (int, float)):
        return _finite(value) and (not measured or value >= 0)
    if isinstance(value, dict):
        return all(_a_result(v, measured) for v in value.values())
    if isinstance(value, list):
        return all(_a_result(v, measured) for v in value)
    return True


def _of_type(value, types):
    number = isinstance(value, (int, float)) and not isinstance(value, bool) and _finite(value)
    for t in types.split("|"):
        if ((t == "string" and isinstance(value, str)) or (t == "boolean" and isinstance(value, bool))
                or (t == "integer" and number and float(value).is_integer())
                or (t == "number" and isinstance(value, (int, float)) and not isinstance(value, bool))
                or (t == "object" and isinstance(value, dict)) or (t == "list" and isinstance(value, list))
                or (t == "null" and value is None)
                or (t == "spread" and isinstance(value, dict) and isinstance(value.get("median"), (int, float)))):
            return True
    return False


def check(rec, where):
    """A record against the schema: every key declared (a field, or its strategy's counter), each of
    its type. A strategy this checkout does not register (a binary built with one of its own) keeps
    its counters as its own."""
    name = rec.get("name") or parse_label(rec.get("strategy", ""))[0]
    for key, value in rec.items():
        f = field(key, name if name in KNOWN else None)
        if f is None and name not in KNOWN:
            continue
        if f is None:
            raise ResultsError(f"{where}: '{key}' is not a field of the record schema, nor a counter '{name}' declares "
                               "(memfine schema lists them)")
        _check_value(key, value, f, where, result=key not in ("config", "env"))


def _check_value(key, value, f, where, result=True):
    """A value of its declaration's type and, with `result`, a result: finite, and not negative where
    it has a unit."""
    if not _of_type(value, f["type"]):
        raise ResultsError(f"{where}: {key}: expected {f['type']}, got {_shown(value)}")
    if result and not _a_result(value, bool(f["unit"])):
        raise ResultsError(f"{where}: {key}: not a result ({'negative or ' if f['unit'] else ''}not finite): "
                           f"{_shown(value)}")


def _shown(value):
    try:
        return json.dumps(value)[:60]
    except (ValueError, RecursionError):
        return "(unprintable)"


def _objects(path):
    """(line number, JSON object) for each line of a file; a bad line is an error naming file and line."""
    if os.path.isdir(path):
        raise ResultsError(f"{path}: a folder, not a results file")
    if os.path.exists(path) and not os.path.isfile(path):
        raise ResultsError(f"{path}: not a regular file (a FIFO, socket or device): not read")
    try:
        f = open(path, "rb")
    except OSError as e:
        raise ResultsError(f"{path}: {e.strerror}")
    with f:
        for n, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise ResultsError(f"{path}:{n}: not UTF-8 text ({e.reason} at byte {e.start})")
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except (ValueError, RecursionError) as e:
                why = "nested too deeply" if isinstance(e, RecursionError) else str(e)[:120]
                raise ResultsError(f"{path}:{n}: not a JSON record ({why})")
            if not isinstance(rec, dict):
                raise ResultsError(f"{path}:{n}: not a JSON object")
            yield n, rec


def load(path, required=("experiment", "point", "strategy", "status")):
    """Reads a records file; a bad line is an error naming file and line."""
    records = []
    for n, rec in _objects(path):
        for key in required:
            if key not in rec:
                raise ResultsError(f"{path}:{n}: record has no '{key}'")
        check(rec, f"{path}:{n}")
        records.append(rec)
    if not records:
        raise ResultsError(f"{path}: no records")
    return records


def load_projections(path, added=()):
    """Reads `memfine project --json`'s lines, each against its declaration (schema.json's
    projection); `added`: keys a script wrote beside them."""
    lines = []
    for n, rec in _objects(path):
        for key, value in rec.items():
            if key in added:
                continue
            f = PROJECTION.get(key)
            if f is None:
                raise ResultsError(f"{path}:{n}: '{key}' is not a field memfine project --json declares "
                                   "(memfine schema lists them)")
            _check_value(key, value, f, f"{path}:{n}")
        lines.append(rec)
    return lines


def records_file(folder):
    """A results folder's records file: results.jsonl, or train.jsonl for a training run."""
    if os.path.isfile(folder):
        return folder
    for name in ("results.jsonl", "train.jsonl"):
        path = os.path.join(folder, name)
        if os.path.exists(path):
            return path
    raise ResultsError(f"{folder}: neither results.jsonl nor train.jsonl")


def is_training(path):
    return os.path.basename(path) == "train.jsonl"


def read_csv(name):
    """One of experiments/data's files, as rows of strings."""
    with open(os.path.join(DATA, name)) as f:
        return list(csv.DictReader(f))


# ---- strategies: name, role, parameters ----

def _value(text):
    """A label's parameter value as the record's params hold it: 4, 1.25, true, auto, [1,2]."""
    try:
        return json.loads(text)
    except ValueError:
        if text.startswith("["):
            return [_value(t.strip()) for t in text[1:-1].split(",") if t.strip()]
        return text


def parse_label(label):
    """'memfine(chunks=4,experts=moe_act)' -> ('memfine', {'chunks': 4, 'experts': 'moe_act'})."""
    m = re.fullmatch(r"([^()]+)(?:\((.*)\))?", label)
    if not m:
        return label, {}
    name, body = m.group(1), m.group(2) or ""
    params, depth, cur = {}, 0, ""
    for ch in body + ",":
        depth += ch in "[{"
        depth -= ch in "]}"
        if ch == "," and depth == 0:
            if "=" in cur:
                k, v = cur.split("=", 1)
                params[k] = _value(v)
            cur = ""
        else:
            cur += ch
    return name, params


def name_of(r):
    return r.get("name") or parse_label(r["strategy"])[0]


def params_of(r):
    """Every parameter of the record's strategy (memfine writes them all); a record written before
    it did: those its label names."""
    return r["params"] if isinstance(r.get("params"), dict) else parse_label(r["strategy"])[1]


def matches(r, name=None, role=None, status=None, **params):
    if name is not None and name_of(r) != name:
        return False
    if role is not None and r.get("role") != role:
        return False
    if status is not None and r.get("status") != status:
        return False
    have = params_of(r)
    return all(k in have and have[k] == v for k, v in params.items())


def select(records, **how):
    """The records of the strategies that match: select(recs, name="memfine", chunks="auto")."""
    return [r for r in records if matches(r, **how)]


def first(records, **how):
    return next(iter(select(records, **how)), None)


# The paper's methods and ours beside them, as selections (its figures name them so).
MACT = dict(name="memfine", chunks="auto", objective="memory", store_when_fits=False, experts="stored")
FIXED8 = dict(name="memfine", chunks=8, experts="stored")
STORE_WHEN_FITS = dict(name="memfine", chunks="auto", store_when_fits=True)
OBJECTIVE_TIME = dict(name="memfine", chunks="auto", objective="time")
BASELINE = dict(role="baseline")
REFERENCE = dict(role="reference")
METHODS = [("1: full recomputation", BASELINE), ("2: MemFine, 8 chunks", FIXED8), ("3: MemFine + MACT", MACT),
           ("MACT + store when it fits (ours)", STORE_WHEN_FITS), ("MACT planning for time (ours)", OBJECTIVE_TIME)]


def method_name(r):
    """The paper's name of a record's method, or its label."""
    return next((n for n, how in METHODS if matches(r, **how)), r["strategy"])


def drops(r):
    """Whether the strategy drops assignments (capacity capping): it computes another model."""
    return r.get("dropped_fraction") is not None


# ---- points and sweeps ----

def by_point(records):
    points = {}
    for r in records:
        points.setdefault(r["point"], []).append(r)
    return points


def point_values(point):
    """'model.seq=512,workload.alpha=1.2' -> {'model.seq': 512, 'workload.alpha': 1.2}; 'base' -> {}."""
    if point == "base":
        return {}
    out = {}
    for part in re.split(r",(?=[A-Za-z_][\w.]*=)", point):
        k, _, v = part.partition("=")
        out[k] = _budget_mib(v) if k == "memory.budget" else _value(v)
    return out


# A sweep key as a person reads it in a title (keys not listed keep their name).
_KEY_WORDS = {"workload.alpha": "zipf alpha", "workload.sigma": "lognormal sigma", "parallel.ep": "EP",
              "model.seq": "sequence", "model.hidden": "hidden", "model.experts": "experts", "model.topk": "top-k",
              "model.layers": "layers", "model.micro_batch": "micro-batch", "workload.hot_fraction": "hot share",
              "workload.kind": "routing", "kernels": "kernels", "dtype": "dtype"}


def key_words(key):
    """A sweep key as an axis names it: 'memory.budget' -> 'memory budget (MiB)', 'parallel.ep' -> 'EP'."""
    return "memory budget (MiB)" if key == "memory.budget" else _KEY_WORDS.get(key, key)


def words(key, value):
    """'memory.budget', 170.0 -> 'budget 170 MiB'; 'workload.alpha', 1.5 -> 'zipf alpha 1.5'."""
    if key == "memory.budget":
        return "no budget" if value is None else f"budget {value:g} MiB"
    return f"{_KEY_WORDS.get(key, key)} {value:g}" if isinstance(value, (int, float)) else f"{_KEY_WORDS.get(key, key)} {value}"


def point_title(point_or_pairs):
    """A point (or its (key, value) pairs) in words: 'zipf alpha 1.5, EP 8'."""
    pairs = point_values(point_or_pairs).items() if isinstance(point_or_pairs, str) else point_or_pairs
    return ", ".join(words(k, v) for k, v in pairs) or "one point"


def _budget_mib(text):
    """A budget as its point writes it, in MiB: 100MiB, 1GiB, 104857600."""
    for unit, scale in (("TiB", 2.0 ** 20), ("GiB", 1024.0), ("MiB", 1.0), ("KiB", 1 / 1024.0), ("GB", 1e9 / MIB),
                        ("MB", 1e6 / MIB)):
        if text.endswith(unit):
            return float(text[:-len(unit)]) * scale
    try:
        return float(text) / MIB
    except ValueError:
        return text


def sweep_axes(records):
    """The swept keys and their values in the order of the points: {key: [values]}."""
    axes = {}
    for r in records:
        for k, v in point_values(r["point"]).items():
            vals = axes.setdefault(k, [])
            if v not in vals:
                vals.append(v)
    return {k: v for k, v in axes.items() if len(v) > 1}


def overload(r):
    """s' over the balanced share; under a schedule the hottest timed step's (records before that was the
    record's own definition gave the first step's, so it is taken from the per-step rows where present)."""
    per = r.get("tokens_received_per_step")
    m = r.get("config", {}).get("model", {})
    if per and m.get("seq") and m.get("topk"):
        return max(max(row) for row in per if row) / (m["seq"] * m.get("micro_batch", 1) * m["topk"])
    return r.get("overload_factor") or 0


def activation(r):
    return r.get("peak_activation_bytes")


def model_error(r):
    """The implementation model's relative error on the activation peak, (predicted - measured) /
    measured; None where the record has no prediction."""
    p = r.get("predicted_activation_bytes")
    return (p - activation(r)) / activation(r) if p else None


def median_ms(r):
    s = r.get("step_ms")
    return s["median"] if isinstance(s, dict) else s if isinstance(s, (int, float)) else None


def step_max_ms(r):
    """The slowest timed step (the median where only it is recorded)."""
    s = r.get("step_ms")
    return s.get("max", s["median"]) if isinstance(s, dict) else median_ms(r)


def hottest(records):
    """Real ranks: per point and strategy, the rank with the largest activation peak (the one that
    limits the job); one process: the records themselves."""
    best = {}
    for r in records:
        k = (r["point"], r["strategy"])
        if k not in best or (activation(r) or 0) > (activation(best[k]) or 0):
            best[k] = r
    return [r for r in records if best[(r["point"], r["strategy"])] is r]


# ---- where records come from ----

def env_of(records):
    return next((r.get("env") for r in records if r.get("env")), {}) or {}


def commit_text(commit):
    """'0d58a23' or '0d58a23 with uncommitted changes': a '-dirty' commit says the tree differed."""
    if commit.endswith("-dirty"):
        return f"commit {commit[:-6]} with uncommitted changes"
    return f"commit {commit}"


def source_line(path, records):
    env = env_of(records)
    commits = sorted({(r.get("env") or {}).get("git_commit", "?") for r in records if r.get("env")} or {"?"})
    commit = commit_text(commits[0]) if len(commits) == 1 else "commits " + ", ".join(commits)
    return (f"Source: {os.path.relpath(path)} ({commit}, LibTorch {env.get('libtorch', '?')}, "
            f"{env.get('device_name', '?')}, {env.get('threads', '?')} threads, {env.get('date', '?')})")


def device_label(records):
    env = env_of(records)
    return f"{env.get('device', '?')}: {env.get('device_name', '?')}"


def config_of(records):
    return next((r.get("config") for r in records if r.get("config")), {}) or {}


def _budget_text(budget):
    """'budget 98 MiB', or in GiB from 1 GiB on."""
    return f"budget {budget / MIB / 1024:.4g} GiB" if budget >= 1024 * MIB else f"budget {budget / MIB:.4g} MiB"


def config_line(rec_or_config, point=None, skip=()):
    """The model, ep, workload and budget a record (or a point of it) ran with; `skip`: swept keys
    (dotted, as points name them), which differ between the records it stands for."""
    c = rec_or_config.get("config", rec_or_config) if isinstance(rec_or_config, dict) else {}
    m, w = c.get("model", {}), c.get("workload", {})
    budget = (c.get("memory") or {}).get("budget")
    items = [("model.layers", f"layers {m.get('layers')}"), ("model.hidden", f"hidden {m.get('hidden')}"),
             ("model.ffn_hidden", f"ffn {m.get('ffn_hidden')}"),
             ("model.experts", f"experts {m.get('experts')} top-{m.get('topk')}"),
             ("model.seq", f"seq {m.get('seq')}" + (f" x {m['micro_batch']}" if m.get("micro_batch", 1) > 1 else "")),
             ("parallel.ep", f"ep {c.get('parallel', {}).get('ep')}"),
             ("workload.kind", f"workload {w.get('kind')}"),
             ("workload.alpha", f"alpha {w.get('alpha')}" if w.get("kind") == "zipf" else ""),
             ("workload.sigma", f"sigma {w.get('sigma')}" if w.get("kind") == "lognormal" else ""),
             ("workload.schedule", f"schedule {w.get('schedule')}" if w.get("schedule", "none") != "none" else ""),
             ("memory.budget", _budget_text(budget) if isinstance(budget, (int, float)) else ""),
             ("expert_gemm", "expert GEMMs grouped" if c.get("expert_gemm") == "grouped" else "")]
    text = ", ".join(t for k, t in items if t and k not in skip)
    return (point + ": " if point and point != "base" else "") + text


def swept_line(records):
    """'swept: workload.alpha in 0.5, 1.5' or ''."""
    axes = sweep_axes(records)
    return "; ".join(f"swept: {k} in {', '.join(str(v) for v in vs)}" for k, vs in axes.items())


def pct(a, b):
    return f"{100.0 * (a - b) / b:+.1f}%"
