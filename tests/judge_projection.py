"""scripts/judge_projection.py against the memfine it is given (argv[1]): a run the repository's
validation holds is marked seen and left out of the verdict, a new one is judged, and a path or file
it cannot judge is refused with exit 2 before anything is written to stdout."""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CASES = os.path.join(ROOT, "experiments", "project", "validation")
MEMFINE = sys.argv.pop(1) if len(sys.argv) > 1 else os.path.join(ROOT, "build", "memfine")


class Judge(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.tmp)

    def case(self, source, name, edit=lambda text: text):
        """A copy of a validation case under another name, edited."""
        with open(os.path.join(CASES, source + ".yaml")) as f:
            text = re.sub(r"^name: .*$", "name: " + name, f.read(), flags=re.M)
        path = os.path.join(self.tmp, name + ".yaml")
        with open(path, "w") as f:
            f.write(edit(text))
        return path

    def judge(self, *args):
        return subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "judge_projection.py"),
                               "--memfine", MEMFINE, *args], capture_output=True, text=True)

    def test_a_seen_run_is_marked_and_left_out_of_the_verdict(self):
        self.case("mbridge_qwen3_30b_16_fp8", "seen_copy")  # the same run under another file name
        self.case("mbridge_qwen3_30b_16_fp8", "new_run",
                  lambda t: t.replace("tokens_per_s_gpu: 8960", "tokens_per_s_gpu: 4000"))
        self.case("oom_nemo_qwen3_30b_16_vp2", "new_oom", lambda t: t.replace("micro_batch: [1]", "micro_batch: [2]"))
        p = self.judge(self.tmp, "--json")
        self.assertEqual(p.returncode, 0, p.stderr)
        got = json.loads(p.stdout)
        runs = {r["case"]: r for r in got["runs"]}
        self.assertEqual({c: r["seen"] for c, r in runs.items()},
                         {"seen_copy": True, "new_run": False, "new_oom": False})
        error = runs["new_run"]["throughput"][3]
        self.assertGreater(error, 35)  # the projection is far above the edited 4000
        self.assertLess(abs(runs["seen_copy"]["throughput"][3]), 35)
        verdict = got["verdict"]
        self.assertEqual((verdict["over"], verdict["runs"]), ("held out", 2))
        goals = {g["what"]: g for g in verdict["goals"]}
        self.assertAlmostEqual(goals["median absolute throughput error"]["value"], abs(error))  # the seen run out
        self.assertEqual((goals["runs over 35%"]["value"], goals["runs over 35%"]["met"]), (1, False))
        self.assertEqual(goals["the range holds"]["value"], "0 of 1")
        self.assertEqual(verdict["fit"]["out of memory / borderline"] + verdict["fit"]["out of memory / no"]
                         + verdict["fit"]["out of memory / yes"], 1)
        people = self.judge(self.tmp)
        self.assertEqual(people.returncode, 0, people.stderr)
        self.assertIn("seen_copy (seen)", people.stdout)
        self.assertIn("Verdict over 2 runs held out from the validation (1 it holds left out)", people.stdout)

    def test_only_seen_runs_are_judged_in_sample_and_said_so(self):
        self.case("mbridge_qwen3_30b_16_fp8", "seen_copy")
        p = self.judge(os.path.join(self.tmp, "seen_copy.yaml"), "--json")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(json.loads(p.stdout)["verdict"]["over"], "in sample")

    def test_the_validation_judged_gives_reports_figures(self):
        """On the validation's own cases the verdict is REPORT.md's, figure for figure (its today's
        projection: results/model/, made by scripts/project_cases.py from the same code)."""
        sys.path.insert(0, os.path.join(ROOT, "scripts"))
        from plots import validation
        s = validation.summary(validation.runs(os.path.join(ROOT, "results", "model")))
        p = self.judge(CASES, "--json")
        self.assertEqual(p.returncode, 0, p.stderr)
        verdict = json.loads(p.stdout)["verdict"]
        goals = {g["what"]: g["value"] for g in verdict["goals"]}
        self.assertEqual(verdict["over"], "in sample")
        self.assertAlmostEqual(goals["median absolute throughput error"], s["median"], places=6)
        self.assertEqual(goals["the range holds"], f"{s['range'][0]} of {s['range'][1]}")
        self.assertAlmostEqual(goals["the range's median half-width"], s["range"][2], places=6)
        self.assertEqual(goals["peaks within 10%"], f"{s['peaks_within']} of {len(s['peaks'])}")
        self.assertEqual(verdict["fit"], {f"{a} / {b}": n for (a, b), n in s["matrix"].items()})

    def test_what_cannot_be_judged_is_refused_before_anything_is_printed(self):
        unpublished = self.case("mbridge_qwen3_30b_16_fp8", "unpublished", lambda t: t.split("published:")[0])
        searched = self.case("mbridge_qwen3_30b_16_fp8", "searched",
                             lambda t: t.replace("micro_batch: [1]", "micro_batch: [1, 2]"))
        for args, said in (([unpublished], "unpublished.yaml: published: none"),
                           ([searched], "searched.yaml: search: 2 layouts for no_recompute"),
                           ([os.path.join(self.tmp, "absent")], "absent: no such file or folder"),
                           ([self.case("mbridge_qwen3_30b_16_fp8", "bad", lambda t: t + "gpus: many\n")], "bad.yaml:")):
            p = self.judge(*args)
            self.assertEqual((p.returncode, p.stdout), (2, ""), args)
            self.assertIn(said, p.stderr)


if __name__ == "__main__":
    unittest.main()
