"""The examples' own count of trained node-seconds (`--count-trained`), which scripts/bench-trace
holds dtd's goodput ledger against: torch_job.py counts each kept step's time times the world and
keeps the count in its checkpoint (a restart counts the steps it trains again once); in_place_job.py
counts a node's time from one committed step to the next and goes on from its file after a
restart. Runs with PyTorch's virtualenv (scripts/test)."""
import importlib.util
import json
import sys
import tempfile
import unittest
from pathlib import Path
from unittest import mock

ROOT = Path(__file__).resolve().parents[2]


def example(name):
    sys.path[:0] = [str(ROOT / "templates" / "job"), str(ROOT / "prepare-data")]
    spec = importlib.util.spec_from_file_location(name, ROOT / "examples" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


class TorchJobTrainedTest(unittest.TestCase):
    def test_each_step_counts_its_time_times_the_world_and_a_restart_resumes_the_checkpoints(self):
        job = example("torch_job")
        clock = Clock()
        with tempfile.TemporaryDirectory() as d, mock.patch.object(job.time, "monotonic", clock):
            path = str(Path(d) / "trained" / "job.json")
            t = job.Trained(path, 0.0)
            for step in range(1, 5):  # without begin, the first step only starts the clock
                t.step(world=3, step=step)
                clock.t += 0.5
            self.assertAlmostEqual(t.node_s, 3 * 0.5 * 3)
            # A restarted process's first step counts from its loop's start.
            restarted = job.Trained(None, t.node_s)
            restarted.begin()
            clock.t += 0.8
            restarted.step(world=3, step=5)
            self.assertAlmostEqual(restarted.node_s, 3 * 0.5 * 3 + 3 * 0.8)
            # Written at most once a second: at steps 1 and 3 (a second apart), not 2 or 4.
            self.assertEqual(json.loads(Path(path).read_text())["step"], 3)
            # Saved with a checkpoint, read back by the restarted world.
            import torch
            model = torch.nn.Linear(2, 1)
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            ckpt = str(Path(d) / "ckpt.pt")
            job.save(ckpt, 4, model, opt, t.node_s)
            self.assertEqual(job.load(ckpt, model, opt, "cpu"), (4, 4.5))


class InPlaceJobTrainedTest(unittest.TestCase):
    def test_each_committed_step_counts_the_nodes_pace_and_a_restart_goes_on(self):
        job = example("in_place_job")
        clock = Clock()
        with tempfile.TemporaryDirectory() as d, mock.patch.object(job.time, "monotonic", clock):
            t = job.Trained(d, "10.0.1.8")
            for committed in [True, True, False, True, True]:
                clock.t += 1.0
                t.step(committed, 7)
            # True->True 1 s; the failed step and the one after it count nothing; True->True 1 s.
            self.assertAlmostEqual(t.node_s, 2.0)
            # A step whose interval held a 5 s wait for a new quorum counts the node's pace.
            clock.t += 6.0
            t.step(True, 8)
            self.assertAlmostEqual(t.node_s, 3.0)
            clock.t += 1.0
            t.step(True, 8)
            self.assertAlmostEqual(t.node_s, 4.0)
            t.written = 0.0
            clock.t += 1.0
            t.step(True, 8)
            self.assertEqual(json.loads((Path(d) / "10.0.1.8.json").read_text())["node_seconds"], 5.0)
            self.assertAlmostEqual(job.Trained(d, "10.0.1.8").node_s, 5.0)


if __name__ == "__main__":
    unittest.main()
