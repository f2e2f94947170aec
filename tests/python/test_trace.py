"""scripts/trace.py turns a Spot availability trace into scripts/bench-trace's events (scaled,
compressed, with the ideal they offer) and generates synthetic traces. The expectations here are
worked out by hand from small traces.

Run from the repository root: python3 -m unittest discover -s tests/python -v
"""
import importlib.util
import json
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "trace.py"
spec = importlib.util.spec_from_file_location("trace_tool", SCRIPT)
trace = importlib.util.module_from_spec(spec)
spec.loader.exec_module(trace)

MIN = 60_000


def write(text):
    f = tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False)
    f.write(text)
    f.close()
    return f.name


class EventsTest(unittest.TestCase):
    def test_a_trace_is_scaled_compressed_and_warned_ahead(self):
        # 4 instances, then 2 reclaimed at minute 10 (one with a warning, one vanishing), 1 back
        # at minute 20, to minute 30. Scaled to 2 nodes: 2, 1 at minute 10, 2 (rounded) at 20.
        path = write(f"0,add,a\n0,add,b\n0,add,c\n0,add,d\n{10*MIN},remove,a\n{10*MIN},vanish,b\n"
                     f"{20*MIN},add,e\n{30*MIN},remove,c\n")
        t = trace.events(trace.read(path), nodes=2, speed=60, from_hour=0, hours=0.5,
                         warning_s=120, prepare_s=300, seed=1)
        kinds = [(e["at"], e["kind"]) for e in t["events"]]
        self.assertEqual(kinds[:2], [(0.0, "arrive"), (0.0, "arrive")])
        # 4 -> 3 -> 2 of 4 scales 2 -> 2 (1.5 rounds up) -> 1: one reclaim, at 10 s (600 trace
        # seconds / 60), by the trace's second event then: b vanishing, so no warning.
        reclaim = [e for e in t["events"] if e["kind"] in ("warn", "vanish")]
        self.assertEqual([(e["kind"], e["at"], e["gone"]) for e in reclaim], [("vanish", 10.0, 10.0)])
        self.assertEqual(t["duration_s"], 30.0)
        # Offered: 2 nodes for 10 s, 1 for 10 s, 3 * 2 / 4 = 1.5 rounded up to 2 for the last 10 s.
        self.assertEqual(t["ideal_node_s"], 20.0 + 10.0 + 20.0)
        # Preparing the trace forces: 5 s (300 / 60) for each of the 3 arrivals.
        self.assertEqual(t["forced_prepare_node_s"], 15.0)

    def test_skypilot_counts_are_read(self):
        path = write(json.dumps({"metadata": {"gap_seconds": 300}, "data": [4, 4, 2, 4]}))
        steps = trace.read(path)
        self.assertEqual(sum(d for _, d, _ in steps), 4)
        self.assertEqual([ms for ms, d, _ in steps if d < 0], [600_000, 600_000])

    def test_a_bad_line_is_refused_naming_it(self):
        path = write("0,add,a\nten,add,b\n")
        with self.assertRaises(SystemExit) as e:
            trace.read(path)
        self.assertIn(":2:", str(e.exception))


class GenerateTest(unittest.TestCase):
    def test_the_rate_is_per_node_hour_and_the_seed_repeats(self):
        lines = trace.generate(nodes=4, hours=200, rate=1.0, burst=0, back_min=10, unwarned=0, seed=3)
        self.assertEqual(lines, trace.generate(4, 200, 1.0, 0, 10, 0, 3))
        removed = sum(kind == "remove" for _, kind, _ in lines)
        # About 4 nodes x 200 hours x 1 an hour, less the time nodes are away (10 of 60 minutes).
        self.assertTrue(550 < removed < 800, removed)
        self.assertFalse(any(kind == "vanish" for _, kind, _ in lines))

    def test_unwarned_and_bursts(self):
        lines = trace.generate(4, 100, 1.0, burst=1.0, back_min=10, unwarned=1.0, seed=1)
        times = [ms for ms, kind, _ in lines if kind == "vanish"]
        self.assertTrue(times)
        self.assertFalse(any(kind == "remove" for _, kind, _ in lines))
        # A burst takes every running node at the same moment.
        self.assertTrue(any(times.count(t) > 1 for t in times))

    def test_the_command_line(self):
        out = subprocess.run([sys.executable, str(SCRIPT), "generate", "--hours", "1", "--seed", "2"],
                             capture_output=True, text=True, check=True).stdout
        path = write(out)
        events = subprocess.run([sys.executable, str(SCRIPT), "events", path, "--speed", "30"],
                                capture_output=True, text=True, check=True).stdout
        self.assertEqual(json.loads(events)["speed"], 30.0)
        bad = subprocess.run([sys.executable, str(SCRIPT), "events", path, "--speed", "0"],
                             capture_output=True, text=True)
        self.assertEqual(bad.returncode, 2)


class WarnedTest(unittest.TestCase):
    def test_a_warned_reclaim_is_announced_its_warning_ahead(self):
        path = write(f"0,add,a\n0,add,b\n{10*MIN},remove,a\n")
        t = trace.events(trace.read(path), nodes=2, speed=60, from_hour=0, hours=0.5,
                         warning_s=120, prepare_s=300, seed=1)
        warned = [e for e in t["events"] if e["kind"] == "warn"]
        self.assertEqual([(e["at"], e["gone"]) for e in warned], [(8.0, 10.0)])

    def test_a_rebalance_recommendation_comes_its_lead_ahead_of_a_warned_reclaim_only(self):
        # a warned at minute 10, b vanishing at minute 20: a recommendation 5 trace minutes
        # ahead of a's loss (5 s at 60x), none for b, and none before a arrived.
        path = write(f"0,add,a\n0,add,b\n0,add,c\n{10*MIN},remove,a\n{20*MIN},vanish,b\n")
        t = trace.events(trace.read(path), nodes=3, speed=60, from_hour=0, hours=0.5,
                         warning_s=120, prepare_s=300, seed=1, rebalance_s=300)
        kinds = [(e["at"], e["kind"]) for e in t["events"] if e["kind"] != "arrive"]
        self.assertEqual(kinds, [(5.0, "rebalance"), (8.0, "warn"), (20.0, "vanish")])
        slots = {e["kind"]: e["slot"] for e in t["events"] if e["kind"] in ("rebalance", "warn")}
        self.assertEqual(slots["rebalance"], slots["warn"])
        self.assertEqual(t["rebalance_s"], 5.0)
        late = trace.events(trace.read(path), nodes=3, speed=60, from_hour=0, hours=0.5,
                            warning_s=120, prepare_s=300, seed=1, rebalance_s=1200)
        first = [e for e in late["events"] if e["kind"] == "rebalance"][0]
        self.assertEqual(first["at"], 0.0, "not before the instance arrived")

    def test_a_rebalance_lead_under_the_warning_is_refused(self):
        path = write("0,add,a\n")
        bad = subprocess.run([sys.executable, str(SCRIPT), "events", path, "--rebalance", "60"],
                             capture_output=True, text=True)
        self.assertEqual(bad.returncode, 2)
        self.assertIn("--rebalance", bad.stderr)


if __name__ == "__main__":
    unittest.main()
