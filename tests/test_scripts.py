#!/usr/bin/env python3
"""Tests of the plotting and table scripts on small fixture results files."""
import contextlib
import io
import json
import math
import os
import subprocess
import sys
import shutil
import statistics
import tempfile
import unittest
from unittest import mock

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "scripts"))
from plots import errors_file, generic, held_out, paper, quality, records, report, sources, style, sweeps, validation  # noqa: E402

ENV = {"git_commit": "abc", "libtorch": "1.13.0", "device": "cpu", "device_name": "Test CPU", "threads": 2, "date": "today"}
CONFIG = {"model": {"layers": 2, "hidden": 16, "ffn_hidden": 32, "experts": 4, "topk": 2, "seq": 8, "micro_batch": 1},
          "parallel": {"ep": 2}, "workload": {"kind": "zipf", "schedule": "figure5"}, "warmup": 0}


MIB = 2 ** 20


# Parameters as memfine writes them (every declared one): the scripts pick strategies by name, role
# and parameters, never by a label's spelling.
DEFAULTS = {"memfine": {"chunks": 1, "bins": [1, 2, 4, 8], "model": "implementation", "store_when_fits": False,
                        "headroom": 0.05, "experts": "stored", "keep_act": False, "objective": "memory"},
            "capacity": {"capacity_factor": 1.0, "drop_policy": "probs", "pad": False, "recompute": "none"},
            "moeblaze": {"keep_act": False, "block_rows": 256}}


def record(point, strategy, status="ok", act=10, ms=10.0, **extra):
    """A fixture record; `act` in MiB."""
    act = int(act * MIB)  # bytes, as memfine writes them: whole numbers
    name, given = records.parse_label(strategy)
    # Roles as the baselines register them (records carry them; the scripts never match names).
    role = {"full_recompute": "baseline", "no_recompute": "reference"}.get(name)
    r = {"experiment": "fx", "point": point, "strategy": strategy, "name": name,
         "params": dict(DEFAULTS.get(name, {}), **given), "role": role, "status": status,
         "error": None if status == "ok" else "x",
         "static_bytes": 50 * MIB, "peak_activation_bytes": act if status == "ok" else None, "budget_bytes": 100 * MIB,
         "step_ms": {"median": ms, "min": ms, "max": ms} if status == "ok" else None,
         "step_ms_all": [ms, ms, ms] if status == "ok" else [ms], "overload_factor": 2.0,
         "config": CONFIG, "env": ENV, "predicted_activation_bytes": int(act * 1.02)}
    if name == "capacity":
        r["dropped_fraction"] = 0.0
    r.update(extra)
    return r


def write(folder, name, records):
    os.makedirs(os.path.join(folder, name), exist_ok=True)
    path = os.path.join(folder, name, "results.jsonl")
    with open(path, "w") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")
    return path


class Figures(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.out = os.path.join(self.tmp, "out")
        os.makedirs(self.out)
        mact = "memfine(chunks=auto)"
        self.f5 = write(self.tmp, "paper_figure5", [
            record("memory.budget=100", "full_recompute", act=30, ms=10),
            record("memory.budget=100", "memfine(chunks=8)", act=10, ms=12.5),
            record("memory.budget=100", mact, act=15, ms=8, chunks=[[1, 2], [2, 4], [1, 1]], chunk_steps=[0, 1, 2],
                   expert_tokens=[[10, 2, 2, 2], [12, 1, 2, 1]], expert_tokens_step=1),
            record("memory.budget=50", "full_recompute", status="oom"),
            record("memory.budget=50", "memfine(chunks=8)", act=10, ms=12.0),
            record("memory.budget=50", mact, act=15, ms=9, chunks=[[2, 2], [2, 4], [1, 2]], chunk_steps=[0, 1, 2]),
        ])

    def test_measured_table4_rows_and_values(self):
        paper.table4_measured(self.f5, self.out)
        with open(os.path.join(self.out, "table4_measured.md")) as f:
            text = f.read()
        rows = [l for l in text.splitlines() if l.startswith("| budget")]
        self.assertEqual(len(rows), 6)
        mact_100 = next(l for l in rows if "budget 100" in l and "MACT" in l)
        self.assertIn("-50.0%", mact_100)      # 1500 vs full's 3000
        self.assertIn("1.250", mact_100)       # 10 ms / 8 ms
        full_50 = next(l for l in rows if "budget 50" in l and "full recomputation" in l)
        self.assertIn("OOM", full_50)
        self.assertIn("| 50.0 | - | - |", full_50)  # out of memory: no activation, not a zero
        # The paper's claims sit beside the rows they compare to: Model I (full recomputation out
        # of memory) its activation, Model II (it fits) its throughput.
        mact_50 = next(l for l in rows if "budget 50" in l and "MACT" in l)
        self.assertIn("-48.03% act. (Model I)", mact_50)
        self.assertNotIn("+4.42%", mact_50)
        self.assertIn("+4.42% TGS (Model II)", mact_100)
        self.assertNotIn("-48.03%", mact_100)
        self.assertTrue(os.path.getsize(os.path.join(self.out, "table4_measured.tex")) > 0)

    def test_each_figure_writes_a_file(self):
        for fn in (paper.figure2, paper.figure4, paper.figure5):
            for p in fn(self.f5, self.out):
                self.assertGreater(os.path.getsize(p), 1000, p)

    def test_oom_is_drawn_as_out_of_memory(self):
        import matplotlib.pyplot as plt
        captured = {}
        orig = style.save

        def keep(fig, out_dir, stem, caption, tight=True):
            captured["fig"] = fig
            labels = [t.get_text() for ax in fig.axes if ax.get_legend() for t in ax.get_legend().get_texts()]
            captured["labels"] = labels
            captured["lines"] = [(ax.get_title(), l.get_label(), list(l.get_ydata())) for ax in fig.axes for l in ax.lines]
            return orig(fig, out_dir, stem, caption, tight)

        style.save = keep
        try:
            paper.figure4(self.f5, self.out)
        finally:
            style.save = orig
        self.assertTrue(any("out of memory at step 1" in t for t in captured["labels"]), captured["labels"])
        for title, label, ys in captured["lines"]:
            if title == "budget 50" and "full recomputation" in label and "out of memory" not in label:
                self.fail("the OOM strategy was drawn as a throughput line")
            if "out of memory" not in label:
                self.assertTrue(all(y > 0 for y in ys), label)

    def test_sweep_figures_and_model_table(self):
        imb = write(self.tmp, "imbalance_sweep", [
            record("a=0", "no_recompute", act=20), record("a=1", "no_recompute", status="oom", overload_factor=5.0),
            record("a=0", "full_recompute", act=10), record("a=1", "full_recompute", act=12, overload_factor=5.0)])
        self.assertTrue(all(os.path.getsize(p) > 1000 for p in sweeps.imbalance(imb, self.out)))
        cs = write(self.tmp, "chunk_sweep", [record("base", "full_recompute"), record("base", "no_recompute"),
                                              record("base", "memfine(chunks=2)", chunks=2),
                                              record("base", "memfine(chunks=4)", chunks=4)])
        self.assertTrue(all(os.path.getsize(p) > 1000 for p in sweeps.chunks(cs, self.out)))
        cap = write(self.tmp, "capacity_sweep", [record("base", "no_recompute")] + [
            record("base", f"capacity(capacity_factor={f},drop_policy={p})", dropped_fraction=0.1 / f)
            for f in (0.5, 1.0) for p in ("probs", "position")])
        self.assertTrue(all(os.path.getsize(p) > 1000 for p in sweeps.capacity(cap, self.out)))
        sweeps.model_error(cs, self.out)
        with open(os.path.join(self.out, "model_error_table.md")) as f:
            text = f.read()
        self.assertIn("4 of 4 points within 5%", text)
        self.assertIn("+2.00%", text)

    def test_strategies_table_against_full_recompute_and_the_bf16_peak(self):
        gpu_env = dict(ENV, device="cuda", device_name="NVIDIA H100 80GB HBM3")
        path = write(self.tmp, "gpu_memfine", [
            record("parallel.ep=32", "full_recompute", act=40, ms=20, tflops=494.7, env=gpu_env, tokens_received=1000),
            record("parallel.ep=32", "memfine(chunks=8)", act=10, ms=25, tflops=395.76, env=gpu_env, chunks=8),
            record("parallel.ep=32", "no_recompute", status="oom", env=gpu_env),
        ])
        paths = sweeps.strategies(path, self.out, "gpu_memfine", "GPU")
        self.assertTrue(all(os.path.exists(p) for p in paths))
        rows = {line.split(" | ")[1]: line.split(" | ") for line in open(paths[0]) if line.startswith("| parallel")}
        self.assertEqual(rows["memfine(chunks=8)"][10], "-75.0%")      # activation against full recomputation
        self.assertEqual(rows["memfine(chunks=8)"][11], "0.80x")      # speed against full recomputation
        self.assertEqual(rows["full_recompute"][13].strip(" |\n"), "50.0%")  # 494.7 of the H100's 989.4
        self.assertEqual(rows["no_recompute"][2], "oom")
        self.assertEqual(rows["no_recompute"][6], "-")

    def test_kernel_ops_table_from_benchmark_json(self):
        def agg(point, kern, agg_name, value, unit="ms"):
            return {"name": f"BM_DispatchCombine/{point}/{kern}/manual_time_{agg_name}",
                    "run_name": f"BM_DispatchCombine/{point}/{kern}/manual_time", "run_type": "aggregate",
                    "aggregate_name": agg_name, "real_time": value, "time_unit": unit, "rows": 100.0,
                    "label": f"cuda,bfloat16,{kern}"}
        bench = {"context": {"host_name": "gpu", "num_cpus": 16, "libtorch": "2.11", "moe_config": "experiments/gpu_kernels.yaml"},
                 "benchmarks": [agg("base", "aten", "median", 3000.0, "us"), agg("base", "aten", "cv", 0.02),
                                agg("base", "fused", "median", 2.0), agg("base", "fused", "mean", 9.0),
                                {"name": "BM_Matmul/1024", "run_name": "BM_Matmul/1024", "real_time": 1.0}]}
        path = os.path.join(self.tmp, "dispatch_combine.json")
        with open(path, "w") as f:
            json.dump(bench, f)
        md = open(sweeps.kernel_ops(path, self.out)[0]).read()
        self.assertIn("| base | 100 | 3.000 (cv 2.0%) | 2.000 | 1.50x |", md)  # us read as us, mean ignored
        self.assertIn("cuda,bfloat16", md)
        with open(path, "w") as f:
            f.write("{not json")
        with self.assertRaises(records.ResultsError):
            sweeps.kernel_ops(path, self.out)

    def test_corrupt_results_name_the_line(self):
        bad = os.path.join(self.tmp, "bad.jsonl")
        with open(bad, "w") as f:
            f.write(json.dumps(record("p", "s")) + "\n{oops\n")
        with self.assertRaises(records.ResultsError) as ctx:
            records.load(bad)
        self.assertIn("bad.jsonl:2", str(ctx.exception))

    def test_modeled_table4_against_the_paper(self):
        preds = os.path.join(self.tmp, "pred.jsonl")
        with open(preds, "w") as f:
            for point in ("model.layers=16", "model.layers=8"):
                for s, act, c in (("full_recompute", 22.9, 1), ("memfine(chunks=8)", 3.7, 8),
                                  ("memfine(chunks=auto)", 11.9, 2)):
                    r = record(point, s)
                    f.write(json.dumps({"experiment": "t", "point": point, "strategy": s, "name": r["name"],
                                        "params": r["params"], "role": r["role"], "static_gb": 43.0,
                                        "activation_gb": act, "total_gb": 43.0 + act, "chunks": c, "fits": True,
                                        "assumptions": "fixture"}) + "\n")
        paper.table4_modeled(preds, self.out)
        with open(os.path.join(self.out, "table4_modeled.md")) as f:
            text = f.read()
        rows = [l for l in text.splitlines() if l.startswith("| Model")]
        self.assertEqual(len(rows), 6)
        self.assertIn("| 43.0 | 43.0 | +0.0% | 22.9 | 22.9 | +0.0% |", rows[0])
        self.assertIn("| 43.0 | 39.5 | +8.9% |", rows[3])  # error of ours against the paper's Model II static

    def test_quality_table_pairs_seeds_and_says_when_a_difference_exceeds_their_spread(self):
        train = {"steps": 2, "stats_ep": 2}
        cfg = dict(CONFIG, model=dict(CONFIG["model"], vocab=256), train=train)
        finals = {"no_recompute": [2.0, 2.1, 2.2],
                  "capacity(capacity_factor=1.0,drop_policy=probs)": [2.10, 2.21, 2.29],  # +0.1 at every seed
                  "capacity(capacity_factor=2.0,drop_policy=probs)": [2.1, 2.0, 2.2]}     # +0.1, -0.1, 0
        recs = []
        for strategy, losses in finals.items():
            for seed, loss in zip((1, 2, 3), losses):
                for step in (0, 1):
                    # overload = s' * stats_ep / assignments: 1.5 + step in layer 0, 1.25 in layer 1
                    r = {"experiment": "q", "point": f"seed={seed}", "strategy": strategy, "status": "ok", "seed": seed,
                         "step": step, "loss": loss + 1, "expert_tokens": [[4, 4, 4, 4], [4, 4, 4, 4]],
                         "tokens_received_per_layer": [12 + 8 * step, 10]}
                    if step == 1:
                        r["eval_loss"] = loss
                    if "capacity" in strategy:
                        r["dropped_fraction"] = 0.3 - 0.1 * step
                    if step == 0:
                        r.update(config=cfg, env=ENV, role="reference" if strategy == "no_recompute" else None)
                    recs.append(r)
        os.makedirs(os.path.join(self.tmp, "quality"))
        path = os.path.join(self.tmp, "quality", "train.jsonl")
        with open(path, "w") as f:
            f.write("".join(json.dumps(r) + "\n" for r in recs))
        paths = quality.quality(path, self.out)
        self.assertTrue(all(os.path.getsize(p) > 500 for p in paths))
        with open(os.path.join(self.out, "quality_table.md")) as f:
            rows = {line.split(" | ")[0].strip("| "): line.split(" | ") for line in f
                    if line.startswith("| ") and "strategy" not in line}
        self.assertEqual(rows["capacity(capacity_factor=1.0,drop_policy=probs)"][3], "+0.1000 +- 0.0248")
        self.assertEqual(rows["capacity(capacity_factor=1.0,drop_policy=probs)"][4], "yes")
        self.assertEqual(rows["capacity(capacity_factor=2.0,drop_policy=probs)"][4], "no")
        self.assertEqual(rows["capacity(capacity_factor=1.0,drop_policy=probs)"][5], "30.0% -> 20.0%")
        self.assertEqual(rows["capacity(capacity_factor=1.0,drop_policy=probs)"][6].strip(" |\n"), "-1.572")
        lines = "\n".join(report.quality_lines(self.tmp))
        self.assertIn("2.50x", lines)  # the largest overload seen

    def test_cli_runs(self):
        for script, flag in (("figures.py", "--results"), ("plot.py", "--out")):
            r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", script), "--help"], capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn(flag, r.stdout)


class ShellHelp(unittest.TestCase):
    """Each shell script's --help prints its opening comment whole and none of its code, however long
    the comment grows (check-libtorch2 prints a usage block of its own); the two wrappers, python
    and compare-pytorch, hand their arguments on."""

    def test_help_is_the_opening_comment(self):
        for name in sorted(os.listdir(os.path.join(ROOT, "scripts"))):
            path = os.path.join(ROOT, "scripts", name)
            if name in ("python", "compare-pytorch") or not os.path.isfile(path):
                continue
            with open(path) as f:
                lines = f.read().split("\n")
            if "bash" not in lines[0]:
                continue
            r = subprocess.run([path, "--help"], capture_output=True, text=True, timeout=60)
            self.assertEqual(r.returncode, 0, name + ": " + r.stderr)
            if name == "check-libtorch2":
                self.assertTrue(r.stdout.startswith("usage: scripts/check-libtorch2"), r.stdout)
                continue
            head = []
            for line in lines[1:]:
                if not line.startswith("#"):
                    break
                head.append(line[2:] if line.startswith("# ") else line[1:])
            self.assertEqual(r.stdout.rstrip("\n").split("\n"), head, name)


class Plot(unittest.TestCase):
    """`memfine plot`: any results folder, from its records alone."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.tmp, True)

    def captions(self, fn, *args):
        """The texts a figure shows (titles, legends, caption) while `fn` draws it."""
        texts, orig = [], style.save

        def keep(fig, out_dir, stem, caption, tight=True):
            texts.append("caption: " + caption)  # names the source file: a path, not a title
            texts.extend(t.get_text() for t in fig.texts)
            for ax in fig.axes:
                texts.append(ax.get_title())
                texts.extend(t.get_text() for t in ax.texts)
                if ax.get_legend():
                    texts.extend(t.get_text() for t in ax.get_legend().get_texts())
            return orig(fig, out_dir, stem, caption, tight)

        generic.S.save = keep
        try:
            paths = fn(*args)
        finally:
            generic.S.save = orig
        return paths, "\n".join(texts)

    def test_a_hostile_results_file_is_refused_not_a_traceback(self):
        good = json.dumps(record("base", "full_recompute"))
        cases = {"bad_utf8": good.encode() + b"\n" + b'{"experiment": "\xff\xfe"}\n',
                 "huge_int": json.dumps(record("base", "full_recompute", static_bytes=10 ** 400)).encode() + b"\n",
                 "deep": b"[" * 100000 + b"]" * 100000 + b"\n",
                 "negative_ms": json.dumps(record("base", "full_recompute", ms=-3.0)).encode() + b"\n",
                 "nan_ms": json.dumps(record("base", "full_recompute", ms=float("nan"))).encode() + b"\n"}
        for name, data in cases.items():
            folder = os.path.join(self.tmp, name)
            os.makedirs(folder)
            with open(os.path.join(folder, "results.jsonl"), "wb") as f:
                f.write(data)
            with self.assertRaises(records.ResultsError, msg=name) as ctx:
                generic.plot_folder(folder, os.path.join(self.tmp, "figs"))
            self.assertIn("results.jsonl:", str(ctx.exception), name)
        folder = os.path.join(self.tmp, "folder_as_file")
        os.makedirs(os.path.join(folder, "results.jsonl"))
        with self.assertRaises(records.ResultsError) as ctx:
            generic.plot_folder(folder, os.path.join(self.tmp, "figs"))
        self.assertIn("a folder, not a results file", str(ctx.exception))

    def test_projections_are_read_through_their_declaration(self):
        """memfine project --json's lines are read through schema.json's projection: a key it does not
        declare, or a peak that is not a result, is refused at its line; a script's own key is let be."""
        line = {"project": "p", "strategy": "full_recompute", "fits": True, "peak_gb": 41.5, "case_file": "x.yaml"}
        for name, bad, why in (("undeclared", {"speed": 3}, "'speed' is not a field"),
                               ("negative", {"peak_gb": -1.0}, "peak_gb: not a result")):
            path = os.path.join(self.tmp, name + ".jsonl")
            with open(path, "w") as f:
                f.write(json.dumps(line) + "\n" + json.dumps(dict(line, **bad)) + "\n")
            with self.assertRaises(records.ResultsError, msg=name) as ctx:
                records.load_projections(path, added=("case_file",))
            self.assertIn(f"{name}.jsonl:2: ", str(ctx.exception))
            self.assertIn(why, str(ctx.exception))
        path = os.path.join(self.tmp, "good.jsonl")
        with open(path, "w") as f:
            f.write(json.dumps(line) + "\n")
        self.assertEqual(records.load_projections(path, added=("case_file",)), [line])

    def test_names_from_data_stay_inside_the_output_folder(self):
        out = os.path.join(self.tmp, "figs")
        for name in ("/abs/escape", "../../escape", ".hidden"):
            folder = os.path.dirname(write(self.tmp, "f" + str(abs(hash(name))),
                                           [record("base", "full_recompute", experiment=name)]))
            for p in generic.plot_folder(folder, out):
                self.assertEqual(os.path.dirname(os.path.abspath(p)), os.path.abspath(out), p)
                self.assertFalse(os.path.basename(p).startswith("."), p)
        self.assertFalse(os.path.exists(os.path.join(os.path.dirname(self.tmp), "escape_points.png")))

    def test_a_sweep_of_ones_own(self):
        cfg = lambda alpha: dict(CONFIG, workload={"kind": "zipf", "alpha": alpha})
        recs = [record(f"workload.alpha={a}", s, act=act * a, ms=ms, config=cfg(a))
                for a in (0.5, 1.5) for s, act, ms in (("full_recompute", 20, 10), ("memfine(chunks=8)", 8, 13))]
        recs.append(record("workload.alpha=1.5", "no_recompute", status="oom", config=cfg(1.5)))
        recs.append(record("workload.alpha=0.5", "capacity(capacity_factor=1.0,drop_policy=probs)", act=9,
                           dropped_fraction=0.4, config=cfg(0.5)))
        folder = os.path.dirname(write(self.tmp, "my_own_name", recs))
        out = os.path.join(self.tmp, "figs")
        paths, text = self.captions(generic.plot_folder, folder, out)
        self.assertTrue(all(os.path.getsize(p) > 1000 for p in paths), paths)
        self.assertIn("fx_sweep.png", [os.path.basename(p) for p in paths])
        self.assertIn("fx_points.pdf", [os.path.basename(p) for p in paths])
        titles = "\n".join(l for l in text.splitlines() if not l.startswith("caption: ") and "Source:" not in l)
        self.assertNotIn("my_own_name", titles)  # titles from the config, never the folder's or experiment's name
        self.assertIn("swept: workload.alpha in 0.5, 1.5", text)
        self.assertNotIn("alpha 0.5, ", text.split("swept")[0].split("|")[-1])  # the swept key is not named as fixed
        self.assertIn("drops 40%", text)                 # capacity's dropped share beside dropless strategies
        self.assertIn("OOM", text)
        # Side by side, and a training run.
        other = os.path.dirname(write(self.tmp, "other", [record("base", "full_recompute"), record("base", "no_recompute")]))
        self.assertEqual(generic.main([folder, other, "--out", out]), 0)
        self.assertTrue(os.path.exists(os.path.join(out, "side_by_side.png")))
        self.assertEqual(generic.main([os.path.join(self.tmp, "nothing")]), 2)

    def test_a_training_run(self):
        cfg = dict(CONFIG, model=dict(CONFIG["model"], vocab=256), train={"steps": 3, "stats_ep": 2},
                   memory={"budget": 60 * MIB})
        recs = []
        for s in ("no_recompute", "memfine(chunks=auto)"):
            name, params = records.parse_label(s)
            for step in range(3):
                r = {"experiment": "t", "point": "base", "strategy": s, "status": "ok", "seed": 1, "step": step,
                     "loss": 3 - step * 0.1, "step_ms": 5.0, "peak_activation_bytes": (5 + step) * MIB,
                     "expert_tokens": [[4, 4, 4, 4], [8, 0, 4, 4]], "tokens_received_per_layer": [8, 8]}
                if step == 0:
                    r.update(config=cfg, env=ENV, name=name, params=dict(DEFAULTS.get(name, {}), **params), static_bytes=50 * MIB)
                if name == "memfine":
                    r["chunks"] = [1, 2 if step == 1 else 1]
                if step == 2:
                    r["eval_loss"] = 2.5
                recs.append(r)
        os.makedirs(os.path.join(self.tmp, "train"))
        with open(os.path.join(self.tmp, "train", "train.jsonl"), "w") as f:
            f.write("".join(json.dumps(r) + "\n" for r in recs))
        paths, text = self.captions(generic.plot_folder, os.path.join(self.tmp, "train"), os.path.join(self.tmp, "figs"))
        self.assertEqual([os.path.basename(p) for p in paths], ["t_train.png", "t_train.pdf"])
        self.assertIn("the budget's room for activations", text)
        self.assertIn("Chunks per layer and step (memfine(chunks=auto))", text)


class Report(unittest.TestCase):
    """REPORT.md's sentences are decided by the records they stand on."""

    def write_f5(self, tmp, tight_full, mact_ms, fixed_ms):
        loose, tight = dict(budget_bytes=100 * MIB), dict(budget_bytes=50 * MIB)
        write(tmp, "paper_figure5", [
            record("memory.budget=100MiB", "full_recompute", act=30, ms=10, **loose),
            record("memory.budget=100MiB", "memfine(chunks=8)", act=10, ms=12.5, **loose),
            record("memory.budget=100MiB", "memfine(chunks=auto)", act=15, ms=11, chunks=[[1, 1], [1, 1]], chunk_steps=[0, 1],
                   **loose),
            record("memory.budget=50MiB", "full_recompute", status=tight_full, act=30, ms=10, **tight),
            record("memory.budget=50MiB", "memfine(chunks=8)", act=10, ms=fixed_ms, **tight),
            record("memory.budget=50MiB", "memfine(chunks=auto)", act=15, ms=mact_ms, chunks=[[2, 2], [1, 4]],
                   chunk_steps=[0, 1], **tight),
        ])
        preds = os.path.join(tmp, "pred.jsonl")
        with open(preds, "w") as f:
            for point in ("model.layers=16", "model.layers=8"):
                for s, act, c, fits in (("full_recompute", 22.9, 1, False), ("memfine(chunks=8)", 3.7, 8, True),
                                        ("memfine(chunks=auto)", 11.9, 2, True)):
                    r = record(point, s)
                    f.write(json.dumps({"experiment": "t", "point": point, "strategy": s, "name": r["name"],
                                        "params": r["params"], "role": r["role"], "static_gb": 43.0, "activation_gb": act,
                                        "total_gb": 43.0 + act, "chunks": c, "fits": fits}) + "\n")
        return preds

    def section(self, text, title):
        return text.split("## " + title)[1].split("\n## ")[0]

    def test_claims_move_with_the_numbers(self):
        tmp = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, tmp, True)
        out = os.path.join(tmp, "out")
        # Full recomputation fits the tight budget, MACT is slower than the fixed chunks there.
        preds = self.write_f5(tmp, tight_full="ok", mact_ms=14.0, fixed_ms=12.0)
        with open(report.report(tmp, preds, out)[0]) as f:
            text = f.read()
        agree, differ = self.section(text, "Where we agree"), self.section(text, "Where we do not, and why")
        self.assertNotIn("trains where full recomputation runs out of memory", text)
        self.assertIn("throughput, MACT vs fixed 8 chunks (Model I), at milder imbalance (2.0x): the paper +18.26%, ours "
                      "-14.3% (does not reproduce)", differ)
        self.assertIn("full recomputation runs out of memory (Model I)", differ)
        self.assertNotIn("MACT vs fixed 8", agree)
        # Now it runs out of memory and MACT is faster: the same claims move to where we agree.
        preds = self.write_f5(tmp, tight_full="oom", mact_ms=10.0, fixed_ms=11.9)
        with open(report.report(tmp, preds, out)[0]) as f:
            text = f.read()
        agree = self.section(text, "Where we agree")
        self.assertIn("MemFine with MACT trains where full recomputation runs out of memory", agree)
        self.assertIn("throughput, MACT vs fixed 8 chunks (Model I), at milder imbalance (2.0x): the paper +18.26%, "
                      "ours +19.0%", agree)
        # A fixed 8 chunks far slower than the paper's -5.40% is listed among the misses, never as agreement.
        self.assertIn("throughput, fixed 8 chunks vs full recomputation (Model II), at milder imbalance (2.0x): the paper "
                      "-5.39%, ours -20.0% (same direction, another size)",
                      self.section(text, "Where we do not, and why"))

    def test_the_paper_imbalance_rows_take_the_median_of_their_runs(self):
        """A row set at the paper's imbalance comes first, says its imbalance, and its throughput claims
        are the median of its runs' ratios with their range."""
        tmp = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, tmp, True)
        preds = self.write_f5(tmp, tight_full="oom", mact_ms=10.0, fixed_ms=11.9)
        loose = dict(budget_bytes=100 * MIB, overload_factor=20.0)
        for folder, mact_ms in (("paper_imbalance", 9.0), ("paper_imbalance/run2", 10.0), ("paper_imbalance/run3", 11.0)):
            write(tmp, folder, [
                record("memory.budget=100MiB", "full_recompute", act=300, ms=10, **loose),
                record("memory.budget=100MiB", "memfine(chunks=8)", act=40, ms=12, **loose),
                record("memory.budget=100MiB", "memfine(chunks=auto)", act=300, ms=mact_ms, chunks=[[1, 1]], **loose),
                record("memory.budget=50MiB", "full_recompute", status="oom", budget_bytes=50 * MIB, overload_factor=20.0),
                record("memory.budget=50MiB", "memfine(chunks=8)", act=40, ms=12, budget_bytes=50 * MIB, overload_factor=20.0),
                record("memory.budget=50MiB", "memfine(chunks=auto)", act=150, ms=11, chunks=[[4, 2]],
                       budget_bytes=50 * MIB, overload_factor=20.0),
            ])
        with open(report.report(tmp, preds, os.path.join(tmp, "out"))[0]) as f:
            text = f.read()
        rows = [l for l in text.splitlines() if l.startswith("| throughput, MACT vs full recomputation (Model II)")]
        self.assertEqual(len(rows), 2)
        self.assertIn("| 20.0x (`paper_imbalance`) |", rows[0])  # the paper's imbalance first
        self.assertIn("| 2.0x (`paper_figure5`) |", rows[1])
        # Runs: 10/9, 10/10, 10/11 -> +11.1%, +0.0%, -9.1%: the median and the range.
        self.assertIn("+0.0% (median of 3 runs, -9.1% to +11.1%)", rows[0])
        # 8 chunks keep 40 of 300 MiB: -86.7%, within a tenth of the paper's -83.84%: it agrees there.
        self.assertIn("activation memory, fixed 8 chunks vs full recomputation, at the paper's imbalance (20.0x): the "
                      "paper -83.84%, ours -86.7%", self.section(text, "Where we agree"))


class Plotting(unittest.TestCase):
    def test_plotting_leaves_the_committed_files_as_they_are(self):
        """Re-plotting (scripts/reproduce without --remeasure) writes only into its output folder."""
        def state():
            out = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--", "results", "paper_figures"],
                                 capture_output=True, text=True)
            return out.stdout if out.returncode == 0 else None
        before = state()
        if before is None:
            self.skipTest("not a git checkout")
        tmp = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, tmp, True)
        from plots import recipes
        failed = recipes.main(["--results", os.path.join(ROOT, "results", "cpu"), "--out", tmp,
                               "--predictions", os.path.join(ROOT, "results", "model", "paper_table4.jsonl")])
        self.assertEqual(failed, 0, "a recipe failed on the committed results (its error is above)")
        self.assertEqual(state(), before)


class Ceiling(unittest.TestCase):
    def test_no_committed_kernel_runs_above_the_ceiling(self):
        """The committed cost models' ceiling is the best dense GEMM of that machine: no kernel
        measured there may run above it."""
        import glob as _glob
        paths = _glob.glob(os.path.join(ROOT, "results", "*", "cost_model.json"))
        self.assertTrue(paths)
        for path in paths:
            model = json.load(open(path))
            ceiling = model["matmul_ceiling_flops"]
            for name, flops in model["kernel_flops"].items():
                self.assertLessEqual(flops, ceiling * 1.0001, f"{path}: {name} at {flops / ceiling:.2f} of the ceiling")

    def test_no_committed_record_runs_above_its_ceiling(self):
        """Every committed record's model FLOP rate is below the GEMM ceiling its own run measured:
        a fraction above 1 means a ceiling from another moment or machine (as a cache once gave)."""
        import glob as _glob
        paths = _glob.glob(os.path.join(ROOT, "results", "*", "*", "results.jsonl"))
        self.assertTrue(paths)
        for path in paths:
            for n, rec in enumerate(records.load(path), 1):
                f = rec.get("ceiling_fraction")
                if f is not None:
                    self.assertLess(f, 1.0, f"{path}:{n}: {rec['strategy']} at {f:.2f} of its ceiling")


class Variant(unittest.TestCase):
    """The quick (CI) and full variants run on any machine: a cost model belongs to the machine that
    fitted it (validate refuses another's), so they leave out the planner that needs one."""

    def test_a_variant_leaves_out_the_cost_model_and_its_planner(self):
        import experiment_variant
        with open(os.path.join(ROOT, "experiments", "paper_imbalance.yaml")) as f:
            import yaml
            doc = yaml.safe_load(f)
        self.assertIn("cost_model", doc)
        self.assertTrue(any(isinstance(s, dict) and s.get("objective") == "time" for s in doc["strategies"]))
        for mode in ("quick", "full"):
            out = experiment_variant.variant(doc, mode)
            self.assertNotIn("cost_model", out)
            self.assertFalse(any(isinstance(s, dict) and s.get("objective") == "time" for s in out["strategies"]))
            self.assertEqual(len(out["strategies"]), len(doc["strategies"]) - 1)


class TorchCase(unittest.TestCase):
    """A test of a GPU probe's code on this CPU: skipped where this interpreter has no torch."""

    def setUp(self):
        try:
            import torch  # noqa: F401
        except ImportError:
            self.skipTest("no torch for this interpreter")


class LossProbe(TorchCase):
    """The GPU loss probe's dry run on this CPU: torchtitan's eager loss keeps its fp32
    log-probabilities (4 bytes a logit), the bf16 loss its bf16 ones (2); a PyTorch without
    torch.compile gives the compiled row an error, not a number."""

    def test_cpu_held_counts_the_saved_log_probabilities(self):
        r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "gpu_loss_probe.py"), "--device", "cpu",
                            "--tokens", "16", "--vocab", "512"], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        rows = {row["variant"]: row for row in json.loads(r.stdout)["rows"]}
        self.assertAlmostEqual(rows["eager fp32 upcast"]["held_per_logit"], 4.0, delta=0.1)
        self.assertAlmostEqual(rows["eager bf16"]["held_per_logit"], 2.0, delta=0.1)
        import torch
        if not hasattr(torch, "compile"):
            self.assertIn("torch.compile needs PyTorch 2", rows["compiled fp32 upcast"]["error"])


class CompileProbe(TorchCase):
    """The GPU compile probe's MoE half is the routed sum it stands for: each token's experts' SwiGLU
    outputs, weighted by its renormalised top-k probabilities, whatever the padding of the groups;
    its dry run times the eager block and gives the compiled one a number or an error."""

    def test_the_permuted_padded_experts_are_each_tokens_weighted_sum(self):
        import torch
        import torch.nn.functional as F
        sys.path.insert(0, os.path.join(ROOT, "scripts"))
        import gpu_compile_probe as probe
        c = probe.SMALL
        p = probe.params(c, "cpu", torch.float64, torch.Generator().manual_seed(1))
        t = torch.randn(37, c["hidden"], dtype=torch.float64)
        got = probe.moe(p, t, c, grouped=False)
        y = probe.rms(t, p["ffn_norm"])
        probs = torch.softmax((y @ p["router"]).float(), dim=-1)  # the router in fp32, as torchtitan's
        top, idx = probs.topk(c["topk"], dim=-1)
        top = (top / top.sum(-1, keepdim=True)).double()
        want = torch.zeros_like(t)
        for i in range(t.shape[0]):
            for j in range(c["topk"]):
                g, u = (y[i] @ p["w13"][idx[i, j]]).chunk(2)
                want[i] += top[i, j] * ((F.silu(g) * u) @ p["w2"][idx[i, j]])
        self.assertTrue(torch.allclose(got, want, atol=1e-10), (got - want).abs().max())

    def test_cpu_dry_run_times_the_block(self):
        r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "gpu_compile_probe.py"), "--device", "cpu",
                            "--small", "--seq", "32", "--batches", "1", "--repeats", "1"],
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        rows = {row["variant"]: row for row in json.loads(r.stdout)["rows"]}
        self.assertGreater(rows["eager"]["ms"], 0)
        self.assertTrue("ms" in rows["compiled"] or "torch.compile needs PyTorch 2" in rows["compiled"]["error"])


class PeakProbe(TorchCase):
    """The GPU peak probe runs its attention block on a CPU too (where torch imports): a peak of at
    least the saved softmax, [heads, seq, seq], and at most a handful of them."""

    def test_cpu_peak_counts_the_score_matrices(self):
        r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "gpu_peak_probe.py"), "--device", "cpu",
                            "--dtype", "float32", "--seq", "128", "--heads", "4", "--kv-heads", "2", "--head-dim", "8",
                            "--hidden", "32"], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        out = json.loads(r.stdout)
        self.assertEqual(out["heads_seq_seq_bytes"], 4 * 128 * 128 * 4)
        self.assertGreaterEqual(out["peak_in_heads_seq_seq"], 1.0)
        self.assertLess(out["peak_in_heads_seq_seq"], 8.0)


class Validation(unittest.TestCase):
    """The validation table quotes a source's own evidence beside a miss, and only beside a miss."""

    def row(self, name, tokens, evidence):
        layout = {"tp": 1, "pp": 1, "vpp": 1, "ep": 8, "cp": 1, "dp": 8, "micro_batch": 1, "global_batch": 64}
        pub = {"source": "a report", "values": {"tokens_per_s_gpu": 1000.0}}
        if evidence:
            pub["evidence"] = evidence
        return {"project": name, "strategy": "no_recompute", "gpus": 8, "layout": layout, "fits": True,
                "peak_gb": 10.0, "tokens_per_s_gpu": tokens, "step_s": 1.0, "published": pub,
                "step_parts_s": {"compute": 0.5, "comm": 0.2, "launch": 0.0, "optimizer": 0.0}}

    def runs(self, *records, first=()):
        """validation.runs over these records (and `first`, their first projections), written where it
        reads them (and removed after)."""
        d = tempfile.mkdtemp()
        try:
            for name, lines in (("project_validation.jsonl", records), ("project_first.jsonl", first)):
                with open(os.path.join(d, name), "w") as f:
                    f.writelines(json.dumps(r) + "\n" for r in lines)
            return validation.runs(d)
        finally:
            shutil.rmtree(d)

    def test_a_runs_first_projection_is_set_beside_its_error(self):
        now = self.row("a", 1050.0, None)
        now["case_file"] = "experiments/project/validation/a.yaml"
        first = {"case_file": now["case_file"], "strategy": "no_recompute", "tokens_per_s_gpu": 1400.0}
        d = tempfile.mkdtemp()
        try:
            for name, rec in (("project_validation.jsonl", now), ("project_first.jsonl", first)):
                with open(os.path.join(d, name), "w") as f:
                    f.write(json.dumps(rec) + "\n")
            rows = validation.runs(d)
        finally:
            shutil.rmtree(d)
        self.assertAlmostEqual(rows[0]["first_error"], 40.0)
        self.assertEqual(validation.table_rows(rows)[0][6], "+40.0%")
        said = validation.verdict_lines(validation.summary(rows))
        self.assertIn("first projection (what the projection said before any change made after the run entered the "
                      "set): median absolute error 40.0% over 1 runs; 1 over 25%", said[0])  # the headline first

    def test_errors_are_read_apart_by_what_the_source_says_it_graphed(self):
        """REPORT sets the counted runs' errors apart by their lines' cuda_graphs (framework.cuda_graphs):
        graphed in whole or part, not graphed, not stated; nothing is said while no file states it."""
        from plots import project
        now, first = [], []
        for name, tokens, graphs in (("full", 800.0, "full"), ("part", 900.0, "attn, moe_router"),
                                     ("eager", 1100.0, "none"), ("silent", 1000.0, None)):
            r = self.row(name, tokens, None)
            r["case_file"] = name + ".yaml"
            if graphs:
                r["cuda_graphs"] = graphs
            now.append(r)
            first.append(dict(r))
        said = " ".join(project.graph_lines(self.runs(*now, first=first)))
        self.assertIn("graphed (whole or in part): 2 runs, at their first projection median -15.0% (too slow on 2)",
                      said)
        self.assertIn("not graphed: 1 runs, at their first projection median +10.0% (too slow on 0)", said)
        self.assertIn("not stated: 1 runs", said)
        self.assertEqual(project.graph_lines(self.runs(now[3], first=first[3:])), [])

    def test_matched_ab_runs_are_set_side_by_side(self):
        """REPORT sets a graphed run beside an eager one, and an MXFP8 run beside another precision's,
        whose case files differ only in their name, their published figures and that one key: the
        speed ratio measured and projected; a file that differs otherwise is no match, and nothing is
        said without one."""
        import yaml
        from plots import project
        d = tempfile.mkdtemp()
        try:
            now = []
            for name, tokens, graphs, gpus, precision in (
                    ("eager", 1000.0, "none", 16, None), ("graphed", 1000.0, "attn", 16, None),
                    ("bigger", 1000.0, "full", 32, None), ("fp8", 1000.0, "full", 64, "fp8"),
                    ("mx", 1000.0, "full", 64, "mxfp8")):
                case = {"name": name, "model": "m", "gpus": gpus,
                        "framework": {"name": "megatron_te", "cuda_graphs": graphs},
                        "published": {"tokens_per_s_gpu": tokens}}
                if precision:
                    case["precision"] = precision
                with open(os.path.join(d, name + ".yaml"), "w") as f:
                    yaml.safe_dump(case, f)
                r = self.row(name, tokens, None)
                r["case_file"], r["cuda_graphs"] = name + ".yaml", graphs
                if precision:
                    r["precision"] = precision
                now.append(r)
            runs = self.runs(*now, first=[dict(r) for r in now])
            runs[1]["throughput"] = (*runs[1]["throughput"][:3], -20.0)  # measured 1.25x the eager run
            said = project.ab_lines(runs, root=d)
            self.assertEqual(len(said), 2)
            self.assertIn("Matched CUDA graph A/Bs", said[0])
            self.assertIn("graphed (attn) over eager: 1.25x measured, 1.00x projected", said[0])
            self.assertNotIn("bigger", said[0])
            self.assertIn("Matched precision A/Bs", said[1])
            self.assertIn("mx (mxfp8) over fp8: 1.00x measured, 1.00x projected", said[1])
            self.assertEqual(project.ab_lines(runs[:1] + runs[2:3], root=d), [])
        finally:
            shutil.rmtree(d)

    def test_runs_held_out_from_the_range_count_those_past_the_held_out_bound(self):
        """A run first projected with a range was not fitted on: its first error counts against the
        held-out bound (none over 35%) as well as the validation's 25%."""
        now, first = [], []
        for name, then in (("far", 1400.0), ("near", 1300.0), ("close", 1010.0)):
            r = self.row(name, 1000.0, None)
            r["case_file"] = name + ".yaml"
            now.append(r)
            first.append(dict(r, tokens_per_s_gpu=then, tokens_per_s_gpu_range=[900.0, 1100.0]))
        s = validation.summary(self.runs(*now, first=first))
        self.assertEqual((s["entered"]["past"], s["entered"]["throughput"][1]), (1, 2))
        self.assertIn("2 over 25% and 1 over 35% (the held-out goal: none)", " ".join(validation.verdict_lines(s)))

    def test_the_range_todays_projection_carries_is_judged_on_the_held_out_runs(self):
        """Today's projection carries a range of its own: on the runs held out from it, the share it
        holds is said beside the first projections', and how many of their published peaks it puts
        within the peak goal."""
        now, first = [], []
        for name, today, peak in (("held", [900.0, 1100.0], 10.5), ("missed", [1100.0, 1300.0], 14.0),
                                  ("none", None, None)):
            r = self.row(name, 1000.0, None)
            r["case_file"] = name + ".yaml"
            if today:
                r["tokens_per_s_gpu_range"] = today
            if peak:
                r["published"]["values"]["peak_gb"] = peak  # projected 10.0: -4.8% and -28.6%
            now.append(r)
            first.append(dict(r, tokens_per_s_gpu=1000.0, tokens_per_s_gpu_range=[900.0, 1100.0]))
        s = validation.summary(self.runs(*now, first=first))
        self.assertEqual((s["entered"]["now_held"], s["entered"]["now_ranged"]), (1, 2))
        said = " ".join(validation.verdict_lines(s))
        self.assertIn("the range it carries holds 1 of 2", said)
        self.assertIn("it puts 1 of the 2 peaks they published within 10%", said)
        (_, first), (_, now) = s["entered"]["goals"]
        first_peaks = dict((g[0], g[1]) for g in first)["peaks within 10%"]
        self.assertEqual((first_peaks, dict((g[0], g[1]) for g in now)["peaks within 10%"]), ("1 of 2", "1 of 2"))

    def test_a_slow_miss_names_the_calibrated_constants_share(self):
        """Projected too slow, a run's reading names how much of its step the fixed per-pass constant is."""
        r = self.row("slow", 500.0, None)  # published 1000: -50%
        r["step_parts_s"]["calibration"] = 0.25
        (row,) = self.runs(r)
        self.assertIn("the calibrated constant (errors.yaml layer_pass_s, a fixed time a layer pass) is 25% of it",
                      row["why"])
        (fast,) = self.runs(dict(self.row("fast", 2000.0, None), step_parts_s=r["step_parts_s"]))
        self.assertNotIn("calibrated constant", fast["why"])

    def test_the_held_out_goals_are_met_at_their_bounds_and_unjudged_without_runs(self):
        """A goal is met at its bound and not past it; one no run bears on is neither met nor not."""
        at = held_out.goals([15.0, -15.0, 35.0], [(True, 0.2)] * 4 + [(False, 0.2)], [10.0, -10.0], 0, 3)
        self.assertEqual([g[3] for g in at], [True, True, True, True, True, True])
        past = held_out.goals([15.1, 35.1, -15.2], [(True, 0.21)] * 3 + [(False, 0.1)] * 2, [10.1], 1, 3)
        self.assertEqual([g[3] for g in past], [False] * 6)
        none = held_out.goals([], [], None, 0, 0)
        self.assertEqual(([g[3] for g in none], len(none)), ([None] * 5, 5))  # no peaks judged: no row
        table = held_out.table([("first", none), ("now", at)])
        self.assertIn("| peaks within 10% | - | 2 of 2 (met) | all |", table)
        self.assertIn("| the range's median half-width | - | 20.0% (met) | at most 20% |", table)

    def test_each_source_is_weighed_once_beside_the_pooled_median(self):
        """Many runs of one source share its unknowns: the line by source sets each source's median
        beside the median of those medians."""
        now, first = [], []
        for name, tokens in (("big_a", 1100.0), ("big_b", 1100.0), ("big_c", 1100.0), ("small_a", 700.0)):
            r = self.row(name, 1000.0, None)
            r["case_file"] = name + ".yaml"
            now.append(r)
            first.append(dict(r, tokens_per_s_gpu=tokens))
        said = " ".join(validation.verdict_lines(validation.summary(self.runs(*now, first=first))))
        self.assertIn("big 10.0% (3 runs, 3 too fast); small 30.0% (1 run, 0 too fast); each family weighed once "
                      "(the median of their medians): 20.0%.", said)

    def test_a_sources_own_a_b_is_judged_by_its_order(self):
        """Two runs of one source on one workload make a pair: ordered as measured or not, at the first
        projection and today; a run of another source or workload makes none with them."""
        now, first = [], []
        # (name, source, gpus, projected tokens/s today, at first, published)
        for name, source, gpus, today, then, pub in (("a", "S: one", 8, 1200.0, 900.0, 1000.0),
                                                      ("b", "S: two", 8, 1000.0, 1000.0, 1100.0),
                                                      ("c", "T: three", 8, 1000.0, 1000.0, 1000.0),
                                                      ("d", "S: four", 16, 1000.0, 1000.0, 1000.0)):
            r = self.row(name, today, None)
            r["case_file"], r["gpus"], r["model_tflops_gpu"] = name + ".yaml", gpus, today * 1e-3
            r["published"]["source"], r["published"]["values"]["tokens_per_s_gpu"] = source, pub
            now.append(r)
            first.append(dict(r, tokens_per_s_gpu=then, model_tflops_gpu=then * 1e-3))
        runs = self.runs(*now, first=first)
        self.assertEqual([p[:2] for p in sources.pairs(runs)],
                         [("a", "b")])
        said = " ".join(sources.lines(runs, names=True))
        # Measured a/b 0.91: first 0.90 (ordered so), today 1.20 (not).
        self.assertIn("1 pairs, 0 of them within 2% of each other, a tie): at their first projection the projection "
                      "ordered 1 of the 1 others as measured, today 0; the projected ratio's median absolute error "
                      "1.0% at first, 32.0% today; ordered otherwise today: a over b (0.91 measured, 1.20 projected).",
                      said)

    def test_evidence_is_quoted_beside_a_miss_only(self):
        rows = {r["case"]: r for r in self.runs(self.row("miss", 1500.0, "a trace says so"),
                                                  self.row("hit", 1050.0, "a trace says so"),
                                                  self.row("bare", 1500.0, None))}
        self.assertIn("the source measured: a trace says so", rows["miss"]["why"])
        self.assertNotIn("why", rows["hit"])  # +5%: within the goal, nothing to explain
        self.assertNotIn("the source measured", rows["bare"]["why"])
        self.assertNotIn("experts' GEMMs", rows["miss"]["why"])  # a record without the rows says nothing

    def test_an_overestimate_names_its_expert_gemms_rate(self):
        over = self.row("over", 1500.0, None)
        over["expert_gemm"] = {"rows": 512.0, "tflops": 180.7}
        under = self.row("under", 500.0, None)
        under["expert_gemm"] = {"rows": 512.0, "tflops": 180.7}
        rows = {r["case"]: r for r in self.runs(over, under)}
        self.assertIn("its experts' GEMMs run at 512 rows each, 181 TFLOP/s as priced",
                      rows["over"]["why"])
        self.assertNotIn("experts' GEMMs", rows["under"]["why"])  # too slow: communication is the reading

    def test_an_overestimate_sets_the_curve_beside_its_kernels(self):
        slower = self.row("slower", 1500.0, None)
        slower["expert_gemm"] = {"rows": 1024.0, "tflops": 331.5, "table_tflops": 645.7, "accumulated_tflops": 500.6}
        faster = self.row("faster", 1500.0, None)
        faster["expert_gemm"] = {"rows": 4096.0, "tflops": 627.9, "table_tflops": 590.0}  # no fused accumulation
        level = self.row("level", 1500.0, None)
        level["expert_gemm"] = {"rows": 4096.0, "tflops": 627.9, "table_tflops": 647.9, "accumulated_tflops": 625.3}
        rows = {r["case"]: r for r in self.runs(slower, faster, level)}
        self.assertIn("332 TFLOP/s as priced (646 on the GEMM table at one expert's shape, 501 with "
                      "the weight gradients' accumulation into the gradient buffer: priced slower "
                      "than their kernels)", rows["slower"]["why"])
        self.assertIn("628 TFLOP/s as priced (590 on the GEMM table at one expert's shape: priced faster than "
                      "their kernels)", rows["faster"]["why"])
        self.assertIn("priced about as fast as their kernels)", rows["level"]["why"])  # within 5%

    def test_an_underestimate_names_a_curve_slower_than_its_kernels(self):
        """Too slow: communication is the first reading, the curve the second where it lies below the
        kernels at the expert's shape, and neither is said of a curve as fast as its kernels."""
        slow = self.row("slow", 700.0, None)
        slow["expert_gemm"] = {"rows": 2048.0, "tflops": 553.9, "table_tflops": 760.2}
        level = self.row("level", 700.0, None)
        level["expert_gemm"] = {"rows": 4096.0, "tflops": 627.9, "table_tflops": 640.0}
        rows = {r["case"]: r for r in self.runs(slow, level)}
        self.assertIn("exposed communication is 20% of its step", rows["slow"]["why"])
        self.assertIn("compute is 50% of its step, its experts' GEMMs at 2048 rows each, 554 TFLOP/s as priced "
                      "(760 on the GEMM table at one expert's shape: priced slower than their kernels)",
                      rows["slow"]["why"])
        self.assertNotIn("experts' GEMMs", rows["level"]["why"])

    def test_expert_tp_and_a_device_peak_are_named(self):
        """A layout with expert TP says so; a device's used memory is set against the need."""
        r = self.row("etp", 1000.0, None)
        r["layout"]["etp"], r["need_gb"] = 8, 60.0
        r["published"]["values"]["device_gb"] = 75.0
        row = self.runs(r)[0]
        self.assertEqual(row["layout"], "8 GPUs TP1 PP1 EP8 ETP8 mb1")
        self.assertEqual(validation.table_rows([row])[0][4], "60.0 vs 75 (-20.0%, the device's against the need)")

    def test_every_layout_counts_for_fit_the_pairs_too(self):
        pair = self.row("pair_x_learned", 1000.0, None)
        pair["fits"], pair["need_gb"] = False, 82.5
        pair["fit"] = "no"
        s = validation.summary(self.runs(self.row("hit", 1050.0, None), pair))
        self.assertEqual(s["fit"], (1, 2))
        said = " ".join(validation.verdict_lines(s))
        self.assertIn("of 2 published layouts that ran, 1 projected to fit at usable_memory 1.0 and 0 borderline", said)
        self.assertIn("projected not to fit: pair_x_learned (82.5 GB)", said)

    def test_a_change_to_fit_is_judged_by_the_first_fits_made_after_it(self):
        since = validation.LATER_FIT_CHANGES[0][2]
        old, new, oom = (self.row(n, 1000.0, None) for n in ("old", "new", "oom"))
        oom["published"] = {"source": "an issue", "values": {}, "out_of_memory": True}
        for r in (old, new, oom):
            r["case_file"], r["fit"] = r["project"] + ".yaml", "yes"
        # The first projections: before the change, and after it with fits of their own.
        first = [dict(old, date="2026-01-01T00:00:00Z", fit="no"), dict(new, date=since, fit="borderline"),
                 dict(oom, date=since, fit="yes")]
        s = validation.summary(self.runs(old, new, oom, first=first))
        said = " ".join(validation.verdict_lines(s))
        self.assertIn("its own test: 2; at their first projection, of 1 that ran 0 to fit, 1 borderline, 0 not; "
                      "of 1 that ran out of memory 0 not to fit, 0 borderline, 1 to fit (new, oom).", said)

    def test_each_later_change_is_tabled_against_the_runs_entered_after_it(self):
        since = validation.LATER_CHANGES[-1][2]
        new = self.row("new", 1000.0, None)
        new["case_file"] = "new.yaml"
        first = [dict(new, date=since, tokens_per_s_gpu=1400.0, tokens_per_s_gpu_range=[900.0, 1800.0])]
        s = validation.summary(self.runs(new, first=first))
        table = validation.later_table(s)
        self.assertIn(f"| {validation.LATER_CHANGES[-1][0]} ({validation.LATER_CHANGES[-1][1]}) | 1 | 40.0% | 1 | "
                      "1 of 1 |", table)
        self.assertEqual(len(table), 2 + len(validation.LATER_CHANGES))
        # REPORT's words count the held-out runs; project_validation.md's name them.
        self.assertNotIn("(new)", " ".join(validation.verdict_lines(s, names=False)))
        self.assertIn("(new)", " ".join(validation.verdict_lines(s)))

    def test_a_run_out_of_memory_is_a_negative_case_in_the_matrix(self):
        oom = self.row("oom", 1000.0, None)
        oom["published"] = {"source": "an issue", "values": {}, "out_of_memory": True}
        oom["fits"], oom["fit"], oom["need_gb"] = False, "no", 95.0
        missed = self.row("missed", 1000.0, None)
        missed["published"] = {"source": "an issue", "values": {}, "out_of_memory": True}
        s = validation.summary(self.runs(self.row("hit", 1050.0, None), oom, missed))
        self.assertEqual(s["fit"], (1, 1))  # only what ran is checked for fitting
        self.assertEqual(s["matrix"][("out of memory", "no")], 1)
        self.assertEqual(s["matrix"][("out of memory", "yes")], 1)
        self.assertEqual(s["matrix"][("ran", "yes")], 1)
        self.assertIn("| out of memory | 1 | 0 | 1 |", validation.fit_matrix(s))
        self.assertIn("of 2 that ran out of memory (oom, missed), 1 projected not to fit", " ".join(validation.verdict_lines(s)))

    def test_the_range_holds_the_published_figure_or_not(self):
        inside = self.row("inside", 1100.0, None)  # published 1000: 0.909 of the projection
        inside["tokens_per_s_gpu_range"] = [880.0, 1320.0]
        outside = self.row("outside", 1500.0, None)  # 0.667 of it
        outside["tokens_per_s_gpu_range"] = [1200.0, 1800.0]
        rows = {r["case"]: r for r in self.runs(inside, outside)}
        self.assertTrue(rows["inside"]["range"][0])
        self.assertFalse(rows["outside"]["range"][0])
        self.assertAlmostEqual(rows["inside"]["range"][1], 0.2)
        self.assertEqual(validation.summary(list(rows.values()))["range"][:2], (1, 2))

    def test_need_ranges_are_read_by_profile(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "errors.yaml")
            with open(path, "w") as f:
                f.write("speed:\n  runs: 3\nmemory:\n  # ... held 79%.\n  level: 0.8\n"
                        "  megatron_te: {runs: 17, low: 0.8843, high: 1.1309}\n"
                        "  fsdp_te: {runs: 2, low: 0.4829, high: 2.0706}  # its widest miss\n")
            ranges, held = errors_file.need_ranges(path)
            self.assertEqual(ranges, [("megatron_te", 17, 0.8843, 1.1309), ("fsdp_te", 2, 0.4829, 2.0706)])
            self.assertAlmostEqual(held, 0.79)
        self.assertIsNone(errors_file.need_ranges(os.path.join(d, "gone.yaml")))

    def test_a_calibration_source_is_shown_but_not_counted(self):
        calibrated = self.row("calibrated", 3000.0, None)
        calibrated["published"]["calibration"] = "its profile is an input"
        rows = self.runs(self.row("hit", 1050.0, None), calibrated)
        s = validation.summary(rows)
        self.assertEqual(s["throughput"], [rows[0]["throughput"][3]])  # the +200% row is not counted
        self.assertEqual(s["over_worst"], 0)
        self.assertEqual(s["calibration"], ["calibrated"])
        self.assertIn("calibration source, not counted: its profile is an input", rows[1]["why"])
        table = validation.table_rows(rows)
        self.assertTrue(table[1][0].endswith("(calibration)"))
        self.assertIn("not counted, as calibration sources: calibrated", " ".join(validation.verdict_lines(s)))

    def test_a_known_regression_is_shown_not_counted_and_counted_aside(self):
        regressed = self.row("regressed", 3000.0, None)
        regressed["published"]["known_issue"] = "the release notes say so"
        rows = self.runs(self.row("hit", 1050.0, None), regressed)
        s = validation.summary(rows)
        self.assertEqual(s["throughput"], [rows[0]["throughput"][3]])
        self.assertEqual(s["over_worst"], 0)
        self.assertEqual(s["known_issue"], ["regressed"])
        self.assertEqual(s["with_known_issues"][1:], (1, 2))  # counted: the +200% row is over 25%
        self.assertIn("a known regression, not counted: the release notes say so", rows[1]["why"])
        self.assertTrue(validation.table_rows(rows)[1][0].endswith("(known issue)"))
        said = " ".join(validation.verdict_lines(s))
        self.assertIn("not counted, as known regressions of their framework: regressed", said)
        self.assertIn("2 runs, 1 over 25%", said)


class AttentionProbe(TorchCase):
    """The GPU attention probe: GPT-OSS's sinks folded in through the log-sum-exp (as NeMo AutoModel's
    FlexAttention path does) are a softmax with one more logit a head; it counts a window's FLOPs as
    memfine project does; its dry run writes a row per backend and case, measured or saying why not."""

    def test_sinks_through_the_lse_are_one_more_logit(self):
        import torch
        import gpu_attention_probe as p
        g = torch.Generator().manual_seed(0)
        q = torch.randn(1, 4, 16, 8, generator=g, dtype=torch.float64)
        k, v = (torch.randn(1, 2, 16, 8, generator=g, dtype=torch.float64) for _ in range(2))
        sink = torch.randn(4, generator=g, dtype=torch.float64)
        for window in (0, 5):
            plain, lse = p.eager(q, k, v, window)
            joined, _ = p.eager(q, k, v, window, sink)
            self.assertTrue(torch.allclose(p.with_sinks(plain, lse, sink), joined, atol=1e-12), window)
            self.assertFalse(torch.allclose(plain, joined, atol=1e-3), window)  # the sinks do weigh

    def test_a_window_counts_the_pairs_its_mask_keeps(self):
        import gpu_attention_probe as p
        self.assertEqual(p.keys_per_query(4096, 0), 2048)  # causal: half the sequence (FlashAttention's count)
        for seq, window in ((64, 8), (4096, 128), (16, 16)):
            kept = int(p.allowed(seq, window, "cpu").sum())
            self.assertAlmostEqual(seq * p.keys_per_query(seq, window), kept, places=6)
        self.assertEqual(p.forward_flops(4096, 64, 64, 0), 4.0 * 4096 * 2048 * 64 * 64)
        # MLA: queries and keys 192 wide, values 128, as core/model/flops.cpp counts them.
        self.assertEqual(p.forward_flops(4096, 128, 192, 0, 128), 2.0 * 4096 * 2048 * 128 * (192 + 128))

    def test_report_line(self):
        from plots import gpu_report

        def row(model, backend, head_dim, window, sinks, tflops):
            return {"model": model, "backend": backend, "seq": 4096, "head_dim": head_dim, "window": window,
                    "sinks": sinks, "fwd_bwd_tflops": tflops}
        doc = {"device": "Test GPU", "torch": "2.11", "git_commit": "abc", "rows": [
            row("q", "flash", 128, 0, False, 500.0), row("m", "flash", 128, 0, False, 520.0),
            row("q", "cudnn", 128, 0, False, 600.0), row("gpt_oss full", "flash", 64, 0, False, 400.0),
            row("gpt_oss full", "cudnn", 64, 0, False, 450.0), row("gpt_oss full", "flex", 64, 0, False, 300.0),
            row("gpt_oss full", "flex", 64, 0, True, 280.0), row("gpt_oss windowed", "flex", 64, 128, False, 60.0),
            row("gpt_oss windowed", "flex", 64, 128, True, 50.0), row("deepseek_v3 mla", "flex", 192, 0, False, 60.0),
            {"model": "x", "backend": "cudnn", "head_dim": 64, "window": 0, "sinks": False, "error": "no kernel"}]}
        line, blank = gpu_report.attention_probe_lines(doc, "results/x/probes/attention.json")
        self.assertEqual(blank, "")
        self.assertIn("head dim 128: FlashAttention 500-520, cuDNN 600; head dim 64: FlashAttention 400, cuDNN 450.",
                      line)
        self.assertIn("the full causal layer 300 (280 with its sinks), the 128-token windowed layer 60 (50), 0.20 of "
                      "the full layer's rate", line)
        self.assertIn("FlexAttention at DeepSeek-V3's MLA heads (queries and keys 192 wide, values 128), as "
                      "torchtitan runs it: 60 (", line)
        self.assertEqual(gpu_report.attention_probe_lines({"rows": [doc["rows"][-1]]}, "p"), [])

    def test_dry_run_writes_every_case(self):
        import gpu_attention_probe as p
        with tempfile.TemporaryDirectory() as d, contextlib.redirect_stdout(io.StringIO()), \
                contextlib.redirect_stderr(io.StringIO()):
            out = os.path.join(d, "attention.json")
            self.assertEqual(p.main(["--device", "cpu", "--quick", "--repeats", "1", "--out", out]), 0)
            with open(out) as f:
                doc = json.load(f)
        rows = doc["rows"]
        self.assertTrue(all(("error" in r) != ("fwd_bwd_tflops" in r) for r in rows), rows)
        eager = {(r["model"], r["sinks"]) for r in rows if r["backend"] == "eager"}
        self.assertEqual(eager, {("tiny", False), ("tiny windowed", False), ("tiny windowed", True),
                                 ("tiny mla", False)})
        self.assertTrue(all(r["fwd_bwd_tflops"] > 0 for r in rows if r["backend"] == "eager"))
        # SDPA has no window: no flash or cudnn row for the windowed case.
        self.assertFalse([r for r in rows if r["backend"] in ("flash", "cudnn") and r["window"]])


class SeenLines(unittest.TestCase):
    """REPORT's line on what the validation saw by model and framework: a pair whose runs all missed
    one way is named, a mixed one only among the most run."""

    def test_one_way_and_most_run(self):
        from plots import project

        def run(model, framework, seen):
            return {"framework": framework, "record": {"model": model, "validation_seen": seen}}
        runs = [run("a", "megatron_te", {"runs": 3, "too_fast": 3, "held": 1, "error_pct": [60.0, 70.0, 240.0]}),
                run("b", "megatron_te", {"runs": 5, "too_fast": 2, "held": 5, "error_pct": [-10.0, 1.0, 20.0]}),
                run("c", "fsdp_te", {"runs": 1, "too_fast": 0, "held": 1, "error_pct": [-1.0, -1.0, -1.0]}),
                run("d", "torchtitan", {"runs": 0})]
        line, = project.seen_lines(runs)
        self.assertIn("3 pairs have runs", line)
        self.assertIn("one way at their first projection: a under megatron_te (3 runs, too fast, +60% to +240% "
                      "(median +70%); the range holds 1); the two most run: b under megatron_te (5 runs, too fast "
                      "on 2, -10% to +20% (median +1%); the range holds 5); a under megatron_te", line)
        self.assertEqual(project.seen_lines(runs[3:]), [])
        runs[0]["record"].update(hardware="a100_80gb", validation_seen_hardware={
            "runs": 2, "too_fast": 2, "held": 2, "error_pct": [15.0, 20.0, 25.0]})
        self.assertEqual(project.seen_lines(runs)[1], "- By GPU (errors.yaml `seen_hardware`, named beside an answer "
                         "on it): a100_80gb (2 runs, too fast, +15% to +25% (median +20%); the range holds 2).")
        runs[1]["record"].update(validation_seen_micro_batches={
            "bin": "17-64", "runs": 4, "too_fast": 0, "held": 3, "error_pct": [-30.0, -9.0, -2.0]})
        runs[2]["record"].update(validation_seen_micro_batches={
            "bin": "5-16", "runs": 2, "too_fast": 1, "held": 2, "error_pct": [-5.0, 4.0, 13.0]})
        self.assertEqual(project.seen_lines(runs)[2], "- By micro-batches a step on a rank (errors.yaml "
                         "`seen_micro_batches`, named beside an answer by its first row's): 5-16 (2 runs, too fast "
                         "on 1, -5% to +13% (median +4%); the range holds 2); 17-64 (4 runs, too slow, -30% to -2% "
                         "(median -9%); the range holds 3).")


class FirstProjections(unittest.TestCase):
    """scripts/first_projections.py: a run's error in speed whichever figure its source gives (a
    shorter step is faster), and the summary counts what the validation table counts: neither a
    calibration source nor a known regression."""

    def test_errors_and_what_is_counted(self):
        import first_projections as F
        self.assertAlmostEqual(F.throughput_error({"tokens_per_s_gpu": 110}, {"tokens_per_s_gpu": 100}), 0.10)
        self.assertAlmostEqual(F.throughput_error({"step_s": 10}, {"step_s": 11}), 0.10)
        self.assertIsNone(F.throughput_error({"peak_gb": 1}, {"peak_gb": 1}))
        pub = lambda **extra: dict({"values": {"tokens_per_s_gpu": 100}}, **extra)
        current = {("a", "s"): {"tokens_per_s_gpu": 105, "published": pub()},
                   ("b", "s"): {"tokens_per_s_gpu": 100, "published": pub(calibration="fitted on it")},
                   ("c", "s"): {"tokens_per_s_gpu": 100, "published": pub(known_issue="a regression")}}
        first = {k: {"tokens_per_s_gpu": 150} for k in current}
        self.assertEqual(F.summary(first, current), "1 counted runs: median throughput error 50.0% at their first "
                                                    "projection, 5.0% now; over 25%: 1 first, 0 now")

    def test_every_validation_run_has_its_first_projection(self):
        """A run enters the validation set with its first projection committed (issue: a check set is not
        a tuning set): every published run of the committed projections has one."""
        root = os.path.dirname(HERE)
        model = os.path.join(root, "results", "model")
        first = validation._first(model)
        cases = {os.path.join("experiments/project/validation", f) for f in
                 os.listdir(os.path.join(root, "experiments", "project", "validation")) if f.endswith(".yaml")}
        with open(os.path.join(model, "project_validation.jsonl")) as f:
            lines = [json.loads(x) for x in f if x.strip()]
        projected = {r["case_file"] for r in lines}
        self.assertEqual(sorted(cases - projected), [], "validation files without a committed projection")
        missing = [(r["case_file"], r["strategy"]) for r in lines
                   if r.get("published") and r.get("strategy") and (r["case_file"], r["strategy"]) not in first]
        self.assertEqual(missing, [], "runs without a first projection: scripts/python scripts/first_projections.py")


class LayerCheck(unittest.TestCase):
    """The layer-level check: each case's forward and backward as measured beside the projection's
    first and current figures, REPORT's line from the first; every layer case has its first
    projection committed."""

    def test_first_and_current_beside_the_measured(self):
        from plots import project
        with tempfile.TemporaryDirectory() as d:
            def line(fwd, bwd, published=True):
                r = {"case_file": "experiments/project/layers/x_alltoall.yaml", "strategy": "no_recompute",
                     "git_commit": "abc", "moe_layer_ms": {"forward": fwd, "backward": bwd}}
                if published:
                    r["published"] = {"values": {"moe_layer_forward_ms": 4.0, "moe_layer_backward_ms": 8.0}}
                return json.dumps(r) + "\n"
            with open(os.path.join(d, "project_layers.jsonl"), "w") as f:
                f.write(line(4.4, 6.0))
            self.assertIn("BF16 forward: median +10.0% (from +10.0% to +10.0%), projected slower on 1 of 1; BF16 "
                          "backward: median -25.0%", project.layer_lines(d)[0])
            with open(os.path.join(d, "project_layers_first.jsonl"), "w") as f:
                f.write(line(2.0, 8.0))
            self.assertIn("BF16 forward: median -50.0% (from -50.0% to -50.0%), projected slower on 0 of 1; today "
                          "+10.0% (+10.0% to +10.0%); BF16 backward", project.layer_lines(d)[0])
            md, _ = project.layers(os.path.join(d, "project_layers.jsonl"), d)
            with open(md) as f:
                text = f.read()
            self.assertIn("| x_alltoall | forward | 4.000 | 2.000 | -50.0% | 4.400 | +10.0% |", text)

    def test_every_layer_case_has_its_first_projection(self):
        root = os.path.dirname(HERE)
        with open(os.path.join(root, "results", "model", "project_layers_first.jsonl")) as f:
            first = {json.loads(x)["case_file"] for x in f if x.strip()}
        cases = {os.path.join("experiments/project/layers", f) for f in
                 os.listdir(os.path.join(root, "experiments", "project", "layers")) if f.endswith(".yaml")}
        self.assertEqual(sorted(cases - first), [], "layer cases without a committed first projection")


class ProjectionErrors(unittest.TestCase):
    """scripts/projection_errors.py: split conformal's interval at 80% from the data's order
    statistics, none past the data."""

    def test_intervals(self):
        import projection_errors as P
        xs = [i / 10 for i in range(-10, 10)]  # 20 values
        lo, hi = P.equal_tails(xs)
        self.assertEqual((lo, hi), (xs[1], xs[18]))  # floor(21 x 0.1) = 2nd, ceil(21 x 0.9) = 19th
        self.assertIsNone(P.equal_tails(xs[:5]))  # 5 runs cannot give an 80% two-sided range
        self.assertEqual(P.symmetric([0.1, -0.3, 0.2, 0.05]), 0.3)  # ceil(5 x 0.8) = 4th of 4
        self.assertIsNone(P.symmetric([0.1, 0.2, 0.3]))
        cov, half = P.leave_one_out(xs, P.equal_tails)
        self.assertGreaterEqual(cov, 0.8)
        # Leaving a family out: its runs against the range from the others'. A family whose runs all
        # missed one way, past the others' spread, is held by none of it.
        fams = ["a"] * 10 + ["b"] * 10
        held, half, n = P.leave_source_out(xs[:10] + [x + 5 for x in xs[10:]], fams, P.equal_tails)
        self.assertEqual((held, n), (0.0, 2))
        self.assertEqual(P.leave_source_out(xs, ["a"] * 20, P.equal_tails), (None, None, 0))  # no other family
        # In the order they entered: a run is judged by the runs projected before it, none with it.
        when = ["d1"] * 10 + ["d2"] * 9 + ["d3"]
        held, half, n = P.in_order(xs[0::2] + xs[1::2][:9] + [5.0], when, P.equal_tails)
        self.assertEqual((held, n), (9 / 10, 10))  # the first batch has none before it; the outlier is missed
        self.assertEqual(P.in_order(xs[:10], ["d1"] * 10, P.equal_tails), (None, None, 0))
        # The range as applied is centred on the projection: the residuals' median moves it not.
        for a, b in zip(P.centred_tails([x + 5 for x in xs]), P.centred_tails(xs)):
            self.assertAlmostEqual(a, b)
        lo, hi = P.centred_tails(xs)
        self.assertAlmostEqual(lo, xs[1] - statistics.median(xs))
        self.assertAlmostEqual(hi, xs[18] - statistics.median(xs))
        self.assertIsNone(P.centred_tails([]))

    def test_the_term_is_fitted_on_the_projection_without_it(self):
        """The calibration term's fit reads today's step less the term's own part, so a line the old
        term made and one a new term made give the same fit, over the passes the line says the term is
        paid for; a line graphed whole pays none and says nothing of it."""
        import projection_errors as P
        case = "experiments/project/validation/mlm_qwen3_30b_32.yaml"
        line = {"case_file": case, "layout": {"global_batch": 64, "dp": 4, "micro_batch": 2, "pp": 2},
                "published": {"values": {"step_s": 12.0}}, "calibration_passes": 216.0}
        old = P.uncalibrated({**line, "step_s": 10.0, "step_parts_s": {"calibration": 2.0}})
        new = P.uncalibrated({**line, "step_s": 9.0, "step_parts_s": {"calibration": 1.0}})
        self.assertEqual(old, (12.0, 8.0, 216.0))
        self.assertEqual(old, new)
        self.assertIsNone(P.uncalibrated({**line, "step_s": 9.0, "step_parts_s": {"calibration": 0.0},
                                          "calibration_passes": 0.0}))

    def test_the_terms_form_is_judged_beside_others_on_its_runs(self):
        """errors.yaml sets the term's form beside others fitted the same way, each leave-one-out: runs
        whose residual is a fixed time a layer pass are met exactly by that form and by no other."""
        import projection_errors as P
        runs = [(10.0 + 0.5 * n, 10.0, n, k) for n, k in ((2, 1024), (4, 4096), (8, 2048), (16, 8192))]  # 0.5 s a pass
        errors = {name: P.form_leave_one_out(runs, value, step) for name, value, step in P.FORMS}
        fixed, per_token, share = (errors[name] for name, _, _ in P.FORMS)
        self.assertEqual(fixed, [0.0] * 4)
        self.assertGreater(max(per_token), 0.1)
        self.assertGreater(max(share), 0.1)

    def test_seen_by_profile_and_model(self):
        """errors.yaml's `seen`: each profile's models with their runs, how many were too fast and
        held by the range, and their lowest, median and highest first-projection error."""
        import projection_errors as P
        seen = {("megatron_te", "m"): [(10.0, -0.1), (-5.0, 0.05), (50.0, -0.4)], ("fsdp_te", "m"): [(1.0, 0.0)]}
        text = P.seen_text(seen, -0.2, 0.2)
        self.assertEqual(text.splitlines(), [
            "  fsdp_te:", "    m: {runs: 1, too_fast: 1, held: 1, low: 1.0, median: 1.0, high: 1.0}",
            "  megatron_te:", "    m: {runs: 3, too_fast: 2, held: 2, low: -5.0, median: 10.0, high: 50.0}"])
        by_gpu = P.seen_hardware_text({"h100_80gb": seen[("megatron_te", "m")], "a100_80gb": [(20.0, -0.3)]}, -0.2, 0.2)
        self.assertEqual(by_gpu.splitlines(), [
            "  a100_80gb: {runs: 1, too_fast: 1, held: 0, low: 20.0, median: 20.0, high: 20.0}",
            "  h100_80gb: {runs: 3, too_fast: 2, held: 2, low: -5.0, median: 10.0, high: 50.0}"])
        by_batches = P.seen_micro_batches_text({(65, None): [(20.0, -0.3)], (1, 4): seen[("megatron_te", "m")]},
                                               -0.2, 0.2)
        self.assertEqual(by_batches.splitlines(), [
            "  '1-4': {from: 1, to: 4, runs: 3, too_fast: 2, held: 2, low: -5.0, median: 10.0, high: 50.0}",
            "  '65+': {from: 65, runs: 1, too_fast: 1, held: 0, low: 20.0, median: 20.0, high: 20.0}"])
        self.assertEqual([P.micro_batch_bin({"global_batch": g, "dp": 2, "micro_batch": 1}) for g in (8, 10, 128, 130)],
                         [(1, 4), (5, 16), (17, 64), (65, None)])

    def test_memory_by_profile(self):
        """A profile with 4 peaks has its own bound; one with fewer the wider of the pooled bound and
        its own largest miss."""
        import projection_errors as P
        peaks = {"megatron_te": [0.01, -0.02, 0.03, -0.05], "fsdp_te": [0.04]}
        self.assertEqual(P.memory_bound(peaks, "megatron_te"), (0.05, True))
        self.assertEqual(P.memory_bound(peaks, "fsdp_te"), (0.05, False))  # pooled: 4th of 5
        peaks["fsdp_te"] = [0.7]
        self.assertEqual(P.memory_bound(peaks, "fsdp_te"), (0.7, False))  # its own miss is wider
        # Left out in turn: megatron_te's peaks fall back to the pooled bound (3 of their own left);
        # fsdp_te's, with none of its own left, to the pooled 0.05.
        self.assertAlmostEqual(P.memory_leave_one_out(peaks), 4 / 5)
        # A run without a peak: its fit bounds the miss where the projection contradicted it.
        ran, oom = {"published": {}, "usable_gb": 80}, {"published": {"out_of_memory": True}, "usable_gb": 80}
        self.assertAlmostEqual(P.fit_bound({"need_gb": 100}, ran), math.log(0.8))
        self.assertIsNone(P.fit_bound({"need_gb": 70}, ran))
        self.assertAlmostEqual(P.fit_bound({"need_gb": 64}, oom), math.log(1.25))
        self.assertIsNone(P.fit_bound({"need_gb": 90}, oom))
        # A published peak against its counterpart: allocated first, then reserved, then the
        # device's used memory against the need.
        r = {"peak_gb": 50, "reserved_gb": 55, "need_gb": 60}
        self.assertAlmostEqual(P.peak_ratio(r, {"device_gb": 66, "reserved_gb": 44}), 0.8)
        self.assertAlmostEqual(P.peak_ratio(r, {"device_gb": 66}), 1.1)
        self.assertIsNone(P.peak_ratio(r, {"tokens_per_s_gpu": 1}))


class TraceSummary(unittest.TestCase):
    """scripts/trace_summary.py on a made-up profiler trace: overlapping kernels count once in the
    GPU's busy time, a synchronisation counts as a host wait, and a file with no events is refused."""

    def test_busy_time_waits_and_a_bad_file(self):
        import trace_summary
        events = [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": 10},
                  {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 1, "dur": 2},
                  {"ph": "X", "cat": "kernel", "name": "gemm", "ts": 5, "dur": 10},
                  {"ph": "X", "cat": "kernel", "name": "gemm", "ts": 12, "dur": 10},
                  {"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamSynchronize", "ts": 20, "dur": 5},
                  {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoH (Device -> Pinned)", "ts": 30, "dur": 10,
                   "args": {"bytes": 100}}]
        with tempfile.TemporaryDirectory() as d:
            p = os.path.join(d, "t.json")
            with open(p, "w") as f:
                json.dump({"traceEvents": events}, f)
            r = trace_summary.summarize(p, 3)
            self.assertAlmostEqual(r["gpu_busy_ms"], 0.027)  # 5..22 and 30..40
            self.assertAlmostEqual(r["span_ms"], 0.040)
            self.assertEqual((r["kernels"], r["host_waits"], r["launches"]), (2, 1, 1))
            self.assertEqual(r["top_kernels"][0], {"name": "gemm", "ms": 0.02, "count": 2})
            self.assertEqual(r["copies"]["DtoH"]["bytes"], 100)
            with open(p, "w") as f:
                json.dump({"traceEvents": []}, f)
            self.assertEqual(trace_summary.main([p]), 1)


class MemoryHistory(unittest.TestCase):
    """scripts/memory_history.py on a made-up allocator history: the peak is replayed from the events,
    the blocks alive then are named by the suite's own frame, and a file that is no snapshot is refused."""

    def test_peak_and_its_blocks(self):
        import memory_history
        ours = [{"name": "at::native::mul", "line": 1}, {"name": "memfine::combine", "line": 7}]
        events = [{"action": "alloc", "addr": 1, "size": 100, "frames": ours},
                  {"action": "alloc", "addr": 2, "size": 50, "frames": [{"name": "at::native::empty", "line": 3}]},
                  {"action": "free_requested", "addr": 1, "size": 100, "frames": []},
                  {"action": "free_completed", "addr": 1, "size": 100, "frames": []},
                  {"action": "alloc", "addr": 3, "size": 20, "frames": []}]
        with tempfile.TemporaryDirectory() as d:
            p = os.path.join(d, "s.pickle")
            with open(p, "wb") as f:
                import pickle
                pickle.dump({"segments": [], "device_traces": [events]}, f)
            r = memory_history.summarize(p, 5)
            self.assertEqual((r["peak_bytes"], r["alive_at_peak"]), (150, 2))
            self.assertEqual(r["largest"][0], {"bytes": 100, "where": "memfine::combine:7"})
            self.assertEqual(r["largest"][1]["where"], "at::native::empty:3")
            with open(p, "w") as f:
                f.write("not a pickle")
            self.assertEqual(memory_history.main([p]), 1)


def dry_run(probe, out):
    """A kernel probe's CPU dry run (--quick, one repeat), quiet, and the JSON it wrote to `out`."""
    with open(os.devnull, "w") as quiet:
        old, sys.stdout, sys.stderr = (sys.stdout, sys.stderr), quiet, quiet
        try:
            assert probe.main(["--device", "cpu", "--quick", "--repeats", "1", "--out", out]) == 0
        finally:
            sys.stdout, sys.stderr = old
    with open(out) as f:
        return json.load(f)


class GroupedProbe(TorchCase):
    """The GPU grouped GEMM probe's splits and its per-expert loop, checked against the per-expert
    products on a CPU (where torch imports); its dry run writes a case per split, backend and rows."""

    def test_splits_keep_every_row_in_aligned_groups(self):
        import torch
        import gpu_grouped_probe as p
        g = torch.Generator().manual_seed(0)
        for how in p.SPLITS:
            sizes = p.split(512, 8, how, g)
            self.assertEqual((len(sizes), sum(sizes)), (8, 512 * 8), how)
            self.assertTrue(all(s % p.ALIGN == 0 for s in sizes), sizes)
        self.assertEqual(p.split(512, 8, "even", g), [512] * 8)
        self.assertNotEqual(p.split(512, 8, "lognormal", g), [512] * 8)

    def test_the_fused_weight_gradient_accumulates_each_experts_product(self):
        """wgrad_fused: each expert's weight gradient added into its slice of the fp32 buffer by the GEMM
        itself (torch.addmm's documented semantics stand in for cuBLAS's beta = 1 here)."""
        import torch
        import gpu_grouped_probe as p

        def addmm(input, a, b, out_dtype=None, out=None):
            self.assertEqual(out_dtype, torch.float32)
            return out.copy_(input + a.float() @ b.float())
        sizes = [3, 5, 0, 8]
        x, dy = torch.randn(16, 6, dtype=torch.float64), torch.randn(16, 4, dtype=torch.float64)
        main_grad = torch.zeros(4, 6, 4, dtype=torch.float64)
        with mock.patch.object(torch, "addmm", addmm):
            for _ in range(2):
                p.fused_wgrad(sizes)(x, dy, main_grad)
        _, _, wgrad = p.products("loop", sizes, None)
        self.assertTrue(torch.allclose(main_grad, 2 * wgrad(x, dy)))

    def test_the_loop_is_each_experts_products(self):
        import torch
        import gpu_grouped_probe as p
        sizes, k, n = [16, 0, 32], 8, 4
        x, dy = torch.randn(48, k, dtype=torch.float64), torch.randn(48, n, dtype=torch.float64)
        w = torch.randn(3, k, n, dtype=torch.float64)
        fwd, dgrad, wgrad = p.products("loop", sizes, None)
        ends = [0, 16, 16, 48]
        for e in range(3):
            a, b = ends[e], ends[e + 1]
            self.assertTrue(torch.allclose(fwd(x, w)[a:b], x[a:b] @ w[e]))
            self.assertTrue(torch.allclose(dgrad(dy, w)[a:b], dy[a:b] @ w[e].t()))
            self.assertTrue(torch.allclose(wgrad(x, dy)[e], x[a:b].t() @ dy[a:b]))

    def test_the_grouped_calls_are_the_loops_products(self):
        """torch._grouped_mm's documented semantics (PyTorch 2.8: offs the groups' ends along the rows
        of a 2D x 3D product, along the contraction of a 2D x 2D one) stand in for it: the probe's
        grouped calls give the loop's products."""
        import torch
        import gpu_grouped_probe as p

        def reference(a, b, offs):
            ends = [0] + offs.tolist()
            if b.dim() == 3:
                return torch.cat([a[s:e] @ b[g] for g, (s, e) in enumerate(zip(ends, ends[1:]))])
            return torch.stack([a[:, s:e] @ b[s:e] for s, e in zip(ends, ends[1:])])

        sizes = [16, 0, 32]
        x, dy = torch.randn(48, 8, dtype=torch.float64), torch.randn(48, 4, dtype=torch.float64)
        w = torch.randn(3, 8, 4, dtype=torch.float64)
        offs = torch.tensor(sizes).cumsum(0)
        loop = p.products("loop", sizes, None)
        with mock.patch.object(torch, "_grouped_mm", lambda a, b, offs: reference(a, b, offs), create=True):
            grouped = p.products("grouped", sizes, offs)
            for g_fn, l_fn, args in zip(grouped, loop, ((x, w), (dy, w), (x, dy))):
                self.assertTrue(torch.allclose(g_fn(*args), l_fn(*args)))

    def test_dry_run_writes_every_case(self):
        import gpu_grouped_probe as p
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "g.json")
            doc = dry_run(p, out)
        self.assertEqual(doc["backends"], ["loop", "dense"])
        # 2 row counts x (3 splits by the loop + 1 dense GEMM)
        self.assertEqual(len(doc["rows"]), 2 * (3 + 1))
        self.assertTrue(all(r["tflops"] > 0 and "error" not in r for r in doc["rows"]))
        # The weight gradient into an fp32 buffer: timed where experts are grouped, not for one GEMM.
        for r in doc["rows"]:
            self.assertEqual(r.get("wgrad_acc_tflops", 0) > 0, r["backend"] != "dense", r)


class ModelJobsOnce(unittest.TestCase):
    """The projection's tables and REPORT come from results/model, once: a GPU's folder (no
    --predictions) gets none of them, the CPU's default gets them all."""

    def test_a_gpu_folder_draws_no_projection(self):
        from plots import recipes
        names = lambda jobs: {name for name, _, _ in jobs}
        self.assertFalse(names(recipes.jobs("results/h200", None)) & set(recipes.MODEL_JOBS))
        self.assertLessEqual(set(recipes.MODEL_JOBS), names(recipes.jobs("results/cpu", recipes.DEFAULT_PREDICTIONS)))


class OffloadFrontier(unittest.TestCase):
    """Offloading's point on the frontier: on a CPU the emulation's copying out and the modelled wait
    in; on a device its measured step, whose copies already ran on their streams."""

    def test_a_devices_copies_are_not_counted_twice(self):
        from plots import offload
        cpu = record("base", "offload(modules=[core_attn])", ms=100, copy_ms_modelled=30.0, offload_emulation_ms=10.0)
        gpu = dict(cpu, offload_d2h_ms=40.0, offload_h2d_ms=41.0)
        self.assertEqual(offload.frontier_ms(cpu), 120.0)
        self.assertEqual(offload.frontier_ms(gpu), 100.0)
        self.assertEqual(offload.frontier_ms(record("base", "full_recompute", ms=70)), 70.0)


class GpusSideBySide(unittest.TestCase):
    """REPORT's table of GPU folders side by side: a column per GPU, each cell from its records, "-"
    where one GPU has not measured it, nothing for a single GPU."""

    def test_columns_cells_and_gaps(self):
        from plots import gpu_report
        with tempfile.TemporaryDirectory() as tmp:
            dirs = []
            for name, eight_ms, acc in (("a100", 20.0, None), ("h200", 11.0, (100, 104))):
                d = os.path.join(tmp, name)
                env = dict(ENV, device="cuda", device_name=f"NVIDIA {name.upper()}")
                write(d, "gpu_deepseek", [record("base", "full_recompute", ms=10, env=env),
                                          record("base", "memfine(chunks=8)", ms=eight_ms, env=env)])
                if acc:
                    write(d, "gpu_model_accuracy", [
                        record("base", "no_recompute", act=acc[0], env=env,
                               predicted_activation_bytes=int(acc[1] * MIB))])
                    # gpu_wgrad: a row for each way of taking the weight gradients; its records'
                    # lines name the activations, which the buffer changes
                    wgrad = []
                    for way, ms8, act in (("grouped", 12.0, 40), ("per_expert", 10.5, 32)):
                        config = dict(CONFIG, expert_gemm="grouped", graphs="step", expert_wgrad=way)
                        point = f"expert_wgrad={way},graphs=step"
                        wgrad += [record(point, "full_recompute", ms=10, env=env, config=config),
                                  record(point, "memfine(chunks=8)", ms=ms8, act=act, env=env, config=config)]
                    write(d, "gpu_wgrad", wgrad)
                    fused = dict(CONFIG, attention_kernel="sdpa")
                    write(d, "gpu_sdpa", [record("base", "full_recompute", ms=8, env=env, config=fused),
                                          record("base", "memfine(chunks=8)", ms=10, env=env, config=fused)])
                    wgrad_text = "\n".join(gpu_report.chunk_cost_lines(d))
                    fused_text = "\n".join(gpu_report.fused_model_lines(d))
                dirs.append(d)
            text = "\n".join(gpu_report.side_by_side(dirs))
            self.assertEqual(gpu_report.side_by_side(dirs[:1]), [])
        self.assertIn("| 8 chunks / full recomputation, `gpu_sdpa` (the same, attention fused) | - | 0.80x |", text)
        # how attention ran, counted over every record that has it: all but gpu_sdpa's eagerly
        self.assertIn("Attention ran eagerly in 9 of the 11 records with attention", text)
        self.assertNotIn("(`gpu_sdpa` runs it fused)", text)
        for way, cell in (("grouped", "0.83x"), ("per_expert", "0.95x")):
            self.assertIn(f"| 8 chunks / full recomputation, `gpu_wgrad`, experts grouped, weight gradients {way}, "
                          f"graphs step | - | {cell} |", text)
        self.assertIn("- memfine(chunks=8) at expert_wgrad=per_expert,graphs=step: 10.5 ms a step, 0.95x, "
                      "0.03 GiB of activations (the model said 0.03)", wgrad_text)
        # the fused attention's model error: gpu_sdpa's records (the fixture predicts 2% high), not the eager ones
        self.assertIn("attention fused (`gpu_sdpa`", fused_text)
        self.assertIn("full_recompute +2.0%, memfine(chunks=8) +2.0%.", fused_text)
        self.assertNotIn("gpu_wgrad", fused_text)
        self.assertIn("| measure | NVIDIA A100 (", text)
        self.assertIn("| 8 chunks / full recomputation, `gpu_deepseek` (DeepSeek-V3's MoE shape) | 0.50x | 0.91x |", text)
        self.assertIn("| memory model within 5% of the CUDA meter, `gpu_model_accuracy` | - | 1 of 1 (lowest +4.0%) |", text)


class Fp8Probe(TorchCase):
    """The GPU FP8 probe's three GEMMs, each on operands cast in the layout its kernel takes, give the
    bf16 products (torch._scaled_mm's documented semantics stand in for it on a CPU, float16 for E4M3);
    its dry run writes a row per GEMM and says why no FP8 ran."""

    def test_the_fp8_gemms_are_the_bf16_ones(self):
        import torch
        import gpu_fp8_probe as p

        def scaled_mm(a, b, scale_a, scale_b, out_dtype):
            # row-major a, column-major b, as the kernel requires
            self.assertTrue(a.is_contiguous() and b.t().is_contiguous())
            return ((a.double() @ b.double()) * scale_a.double() * scale_b.double()).to(out_dtype)

        x, dy, w = torch.randn(48, 32), torch.randn(48, 16), torch.randn(16, 32)
        plain = p.products(x, w, dy, None)
        with mock.patch.object(torch, "_scaled_mm", scaled_mm, create=True), \
                mock.patch.object(torch, "bfloat16", torch.float32):
            cast = p.products(x, w, dy, torch.float16)
            for part in ("fwd", "dgrad", "wgrad"):
                want, got = plain[part](), cast[part]()
                self.assertEqual(tuple(got.shape), tuple(want.shape), part)
                self.assertTrue(torch.allclose(got.float(), want, rtol=1e-2, atol=1e-2 * want.abs().max().item()), part)

    def test_dry_run_writes_every_gemm(self):
        import gpu_fp8_probe as p
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "f.json")
            doc = dry_run(p, out)
        # The copy's rate first, then 2 row counts x 2 projections; on a CPU the bf16 GEMMs run and no
        # FP8, which each row says
        copy, gemms = doc["rows"][0], doc["rows"][1:]
        self.assertEqual((copy["kind"], copy["elements"]), ("copy", 1 << 16))
        self.assertGreater(copy["gb_s"], 0)
        self.assertEqual([(r["rows"], r["gemm"]) for r in gemms], [(16, "fc1"), (16, "fc2"), (32, "fc1"), (32, "fc2")])
        self.assertTrue(all(r["bf16_tflops"] > 0 and "no FP8 GEMM" in r["error"] for r in gemms))


class GroupedProbeCurve(unittest.TestCase):
    """The probe's records become a figure, a table and the H200 preset's grouped GEMM curve."""

    def doc(self):
        rows = []
        for model, base in (("a", 100.0), ("b", 300.0), ("c", 200.0)):
            for n in (256, 512):
                for backend in ("grouped", "loop"):
                    rows.append({"model": model, "hidden": 64, "ffn": 32, "experts": 4, "rows_per_expert": n,
                                 "split": "even", "backend": backend, "tflops": base * n / 256 / (2 if backend == "loop" else 1)})
        rows.append(dict(rows[0], split="lognormal", tflops=1.0))
        return {"device": "Test GPU", "torch": "2.11", "git_commit": "abc", "dtype": "bfloat16", "repeats": 3, "rows": rows}

    def test_the_curve_is_the_median_over_shapes_of_the_even_grouped_rows(self):
        from plots import grouped_probe
        self.assertEqual(grouped_probe.curve(self.doc()), [[256, 200.0], [512, 400.0]])

    def test_report_names_the_fused_accumulation_where_measured(self):
        from plots import gpu_report
        doc = self.doc()
        for r in doc["rows"]:
            r.update(wgrad_tflops=300.0, wgrad_acc_tflops=90.0)
        line = gpu_report._grouped_probe_lines(doc, "results/x/probes/grouped.json")[0]
        self.assertNotIn("The fused kernel itself", line)
        for r in doc["rows"]:
            if r["backend"] == "loop":
                r["wgrad_fused_tflops"] = 150.0 if r["rows_per_expert"] == 256 else 250.0
        line = gpu_report._grouped_probe_lines(doc, "results/x/probes/grouped.json")[0]
        self.assertIn("The fused kernel itself (each expert's GEMM writing into the buffer, as Transformer Engine "
                      "runs it): 150-150 TFLOP/s at 256 rows, 250-250 at 512.", line)

    def test_figure_and_table(self):
        from plots import grouped_probe
        with tempfile.TemporaryDirectory() as d:
            src = os.path.join(d, "grouped.json")
            with open(src, "w") as f:
                json.dump(self.doc(), f)
            paths = grouped_probe.grouped_probe(src, d)
            self.assertEqual(sorted(os.path.basename(p) for p in paths),
                             ["grouped_probe.pdf", "grouped_probe.png", "grouped_probe_table.md", "grouped_probe_table.tex"])
            with open(os.path.join(d, "grouped_probe_table.md")) as f:
                table = f.read()
        self.assertIn("| b (64, 32, 4) | 300 (150) | 600 (300) |", table)
        self.assertIn("| median over shapes, grouped | 200 | 400 |", table)

    def test_the_h200_preset_is_the_committed_probes_curve(self):
        import yaml
        from plots import grouped_probe
        probe = os.path.join(ROOT, "results", "h200", "probes", "grouped.json")
        with open(os.path.join(ROOT, "experiments", "project", "hardware.yaml")) as f:
            preset = yaml.safe_load(f)["h200"]["grouped_gemm_curve"]
        self.assertEqual(preset, grouped_probe.curve(grouped_probe.load(probe)))

    def test_the_h100_work_curve_is_the_committed_probes_best_by_work(self):
        import yaml
        from plots import grouped_probe
        probe = os.path.join(ROOT, "results", "h200", "probes", "grouped.json")
        with open(os.path.join(ROOT, "experiments", "project", "hardware.yaml")) as f:
            preset = yaml.safe_load(f)["h100_80gb"]["grouped_gemm_work_curve"]
        self.assertEqual(preset, grouped_probe.work_curve(grouped_probe.load(probe)))
        doc = {"rows": [{"model": m, "hidden": 1000, "ffn": 1000, "experts": e, "rows_per_expert": r,
                         "split": "even", "backend": "grouped", "tflops": t}
                        for m, e, r, t in (("a", 1, 1000, 100), ("b", 2, 500, 150), ("c", 4, 1000, 90),
                                           ("d", 1, 8000, 300))]}
        # Work 6 x rows x experts x 1000 x 1000: a and b tie at 6 GFLOP (the better kept); c, at 24,
        # slower than the best below it, adds no point.
        self.assertEqual(grouped_probe.work_curve(doc), [[6.0, 150], [48.0, 300]])


class RoutingOverload(unittest.TestCase):
    """scripts/routing_overload.py on made-up shares: a group's hottest expert over its share, averaged
    over layers and groups, and a group's worst layer; a folder with no share files is refused."""

    def test_mean_and_worst_layer(self):
        import numpy as np
        import routing_overload
        # 2 questions, 2 layers, 4 experts: layer 0 even, layer 1 half on one expert.
        x = np.array([[[0.25] * 4, [0.5, 0.5 / 3, 0.5 / 3, 0.5 / 3]]] * 2, dtype=np.float32)
        with tempfile.TemporaryDirectory() as d:
            np.save(os.path.join(d, "a.npy"), x)
            r = routing_overload.summarize(d, 1)
            self.assertEqual((r["files"], r["groups"]), (1, 2))
            self.assertAlmostEqual(r["mean"], (1 + 2) / 2, places=5)
            self.assertAlmostEqual(r["overload"], 2, places=5)
            self.assertAlmostEqual(r["layer_medians"][0], 1, places=5)
            self.assertEqual(routing_overload.main([d, "--group", "3"]), 1)  # no file holds 3 questions
        with tempfile.TemporaryDirectory() as d:
            self.assertEqual(routing_overload.main([d]), 1)

    def test_whole_dataset_counts(self):
        import pickle
        import routing_overload
        with tempfile.TemporaryDirectory() as d:
            f = os.path.join(d, "counts.pkl")
            with open(f, "wb") as out:
                pickle.dump({0: [4, 2, 1, 1], 1: [2, 2, 2, 2]}, out)  # layer 0's hottest at 2x its share
            r = routing_overload.from_counts(f)
            self.assertEqual((r["layers"], r["experts"]), (2, 4))
            self.assertAlmostEqual(r["mean"], 1.5)
            self.assertAlmostEqual(r["overload"], 2.0)
            with open(f, "wb") as out:
                pickle.dump({0: [4, 2, 1, 1], 1: [2, 2, 2]}, out)
            self.assertEqual(routing_overload.main(["--counts", f]), 1)  # 3 experts where the others have 4
            with open(f, "wb") as out:
                pickle.dump([1, 2], out)
            self.assertEqual(routing_overload.main(["--counts", f]), 1)  # not a map of layers

    def test_shuffled_groups_mix_the_files(self):
        import numpy as np
        import routing_overload
        # Two subjects of 2 questions each, 1 layer, 4 experts: each subject's assignments on one expert.
        a = np.zeros((2, 1, 4), dtype=np.float32)
        a[:, 0, 0] = 1
        b = np.zeros((2, 1, 4), dtype=np.float32)
        b[:, 0, 1] = 1
        with tempfile.TemporaryDirectory() as d:
            np.save(os.path.join(d, "a.npy"), a)
            np.save(os.path.join(d, "b.npy"), b)
            # One subject a group: every group's hottest expert holds all of it, 4x its share.
            r = routing_overload.summarize(d, 2, consecutive=True)
            self.assertEqual((r["groups"], r["order"]), (2, "consecutive"))
            self.assertAlmostEqual(r["mean"], 4, places=5)
            # Shuffled, a group of all four questions holds both subjects: the hottest at 2x.
            r = routing_overload.summarize(d, 4)
            self.assertEqual((r["groups"], r["order"]), (1, "shuffled (seed 0)"))
            self.assertAlmostEqual(r["mean"], 2, places=5)
            with self.assertRaises(routing_overload.BadInput):
                routing_overload.summarize(d, 4, consecutive=True)  # no one file holds 4 questions
            np.save(os.path.join(d, "c.npy"), np.full((2, 2, 4), 0.25, dtype=np.float32))
            self.assertEqual(routing_overload.main([d]), 1)  # 2 layers where the others have 1


if __name__ == "__main__":
    unittest.main(verbosity=2)
