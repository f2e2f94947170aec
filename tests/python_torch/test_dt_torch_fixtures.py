"""dt_torch (templates/job/dt_torch.py) reads and writes the wire formats from the golden files the
Rust tests check dtd's side against (tests/fixtures/protocol/). Runs with PyTorch's virtualenv
(scripts/test), in one real gloo process group of one process."""
import importlib.util
import json
import os
import sys
import tempfile
import unittest
from pathlib import Path
from unittest import mock

import torch.distributed as dist

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "fixtures" / "protocol"
# dt_torch imports dt_atomic, which ships beside it; in the repository it is in prepare-data/.
sys.path.insert(0, str(ROOT / "prepare-data"))


def load_dt_torch():
    spec = importlib.util.spec_from_file_location("dt_torch", ROOT / "templates" / "job" / "dt_torch.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class DtTorchGoldenTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.group_dir = tempfile.TemporaryDirectory()
        init = f"file://{cls.group_dir.name}/group"
        dist.init_process_group("gloo", init_method=init, rank=0, world_size=1)

    @classmethod
    def tearDownClass(cls):
        dist.destroy_process_group()
        cls.group_dir.cleanup()

    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.tmp = Path(self.dir.name)
        self.env = {
            "DT_GENERATION": "7",
            "DT_NNODES": "1",
            "DT_STRATEGY": "elastic",
            "DT_LAUNCH_PLAN": str(GOLDEN / "launch_plan.json"),
            "DT_ACK_FILE": str(self.tmp / "ack"),
            "DT_PROGRESS_FILE": str(self.tmp / "progress"),
            "DT_NOTICES_FILE": str(GOLDEN / "notices.json"),
            "LOCAL_WORLD_SIZE": "1",
        }

    def tearDown(self):
        self.dir.cleanup()

    def session(self, **env):
        with mock.patch.dict(os.environ, {**self.env, **env}):
            return load_dt_torch().Session()

    def test_under_elastic_the_golden_plan_names_the_generation_and_its_size(self):
        session = self.session()
        session._follow_plan()
        self.assertEqual((session.generation, session.nnodes), (8, 3))

    def test_the_golden_notices_are_this_generations(self):
        session = self.session(DT_STRATEGY="generation", DT_GENERATION="8")
        self.assertEqual([(n["ip"], n["kind"], n["deadline"]) for n in session.notices()], [
            ("10.0.1.5", "interruption", "2026-11-24T08:16:41Z"),
            ("10.0.1.6", "unhealthy", None),
        ])
        self.assertEqual(self.session(DT_STRATEGY="generation").notices(), [])

    def test_the_ack_is_the_golden_ack(self):
        session = self.session(DT_STRATEGY="generation", DT_GENERATION="8")
        self.assertTrue(session.joined())
        self.assertEqual((self.tmp / "ack").read_text(), (GOLDEN / "ack").read_text())

    def test_the_progress_line_holds_the_golden_keys(self):
        session = self.session(DT_STRATEGY="generation", DT_GENERATION="8")
        session.progress(1234, force=True)
        written = json.loads((self.tmp / "progress").read_text())
        golden = json.loads((GOLDEN / "progress.json").read_text())
        self.assertEqual({k: written[k] for k in golden if k != "time"}, {"step": 1234})
        self.assertRegex(written["time"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")
        self.assertEqual((written["generation"], written["world_size"]), (8, 1))

    def test_each_start_of_the_process_is_a_run_of_its_own_from_the_step_before_its_first(self):
        golden = json.loads((GOLDEN / "progress_run.json").read_text())
        runs = []
        for _ in range(2):
            session = self.session(DT_STRATEGY="generation", DT_GENERATION="8")
            session.progress(21, force=True)
            session.progress(35, force=True)
            written = json.loads((self.tmp / "progress").read_text())
            self.assertEqual(written["run"].keys(), golden["run"].keys())
            self.assertEqual((written["step"], written["run"]["from"]), (35, 20))
            self.assertEqual(written["generation"], golden["generation"])
            self.assertTrue(written["run"]["id"].startswith(f"8.{os.getpid()}."))
            runs.append(written["run"]["id"])
        self.assertNotEqual(runs[0], runs[1])

    def test_a_checkpoint_is_said_with_the_golden_key(self):
        session = self.session(DT_STRATEGY="generation", DT_GENERATION="8")
        session.checkpointed(1200)
        session.progress(1234, force=True)
        written = json.loads((self.tmp / "progress").read_text())
        golden = json.loads((GOLDEN / "progress_checkpoint.json").read_text())
        self.assertEqual({k: written[k] for k in golden if k != "time"},
                         {"step": 1234, "checkpoint_step": 1200})

    def test_the_step_time_is_the_golden_line_the_median_of_the_last_ten_in_a_file_of_its_own(self):
        times = self.tmp / "step_times"
        times.mkdir()
        session = self.session(DT_STEP_TIMES=str(times))
        clock = iter([0.0, 0.1, 10.0, 10.3, 20.0, 20.2])
        with mock.patch("time.perf_counter", lambda: next(clock)):
            for step in (39, 40, 41):
                session._computed_at = 0.0  # the once-a-second limit is not under test here
                with session.compute(step):
                    pass
        written = json.loads((times / str(os.getpid())).read_text())
        golden = json.loads((GOLDEN / "step_times.json").read_text())
        self.assertEqual(written.keys(), golden.keys())
        self.assertEqual(written["step"], 41)
        self.assertAlmostEqual(written["compute_s"], 0.2)

    def test_outside_the_agent_compute_times_the_block_and_writes_nothing(self):
        session = self.session()
        with session.compute(1):
            pass
        self.assertEqual(sorted(p.name for p in self.tmp.iterdir()), [])


if __name__ == "__main__":
    unittest.main()
