"""The example job reads and writes the wire formats from the golden files the Rust tests also
check dtd's side against (tests/fixtures/protocol/): the two sides cannot drift apart."""
import datetime
import importlib.util
import json
import tempfile
import time
import unittest
from pathlib import Path
from types import SimpleNamespace
from unittest import mock

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "fixtures" / "protocol"


def load_job():
    spec = importlib.util.spec_from_file_location("elastic_job", ROOT / "examples" / "elastic_job.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def golden(name):
    return (GOLDEN / name).read_text()


class GoldenTest(unittest.TestCase):
    def setUp(self):
        self.job = load_job()
        self.dir = tempfile.TemporaryDirectory()
        self.tmp = Path(self.dir.name)

    def tearDown(self):
        self.dir.cleanup()


class HostFilesTest(GoldenTest):
    def test_every_format_dtd_writes_reads_as_the_same_hosts(self):
        for name in ["hosts.mxnet", "hosts.mpi", "hosts.deepspeed", "hosts.horovod"]:
            with self.subTest(name):
                self.assertEqual(self.job.read_hosts(str(GOLDEN / name)),
                                 ["10.0.1.5", "10.0.1.6", "fd00::7"])


class GenerationTest(GoldenTest):
    def test_the_generation_dtd_writes_is_the_one_the_job_acknowledges(self):
        generation = self.job.read_generation(str(GOLDEN / "generation"))
        self.assertEqual(generation, 8)
        args = SimpleNamespace(ack="file", ack_file=str(self.tmp / "ack"))
        self.job.acknowledge(args, generation, ["10.0.1.7"], [])
        self.assertEqual((self.tmp / "ack").read_text(), golden("ack"))


class HostWorkerLogTest(GoldenTest):
    def test_the_job_appends_the_golden_log(self):
        log = self.tmp / "host_worker_log"
        changes = [
            ("2026-11-24 08:16:41", [("ADDED", "10.0.1.5"), ("ADDED", "10.0.1.6")]),
            ("2026-11-24 08:17:02", [("REMOVED", "10.0.1.5")]),
        ]
        for stamp, batch in changes:
            at = time.strptime(stamp, self.job.TIME_FMT)
            with mock.patch.object(self.job.time, "gmtime", return_value=at):
                self.job.append_log(str(log), batch)
        self.assertEqual(log.read_text(), golden("host_worker_log"))

    def test_the_golden_log_reads_as_its_membership(self):
        members, last, whole = self.job.read_log(str(GOLDEN / "host_worker_log"))
        self.assertEqual((members, last, whole), (["10.0.1.6"], 3, True))


class ProgressTest(GoldenTest):
    def test_the_job_writes_a_golden_progress_line(self):
        path = self.tmp / "progress"
        at = time.strptime("2026-11-24T08:16:41Z", "%Y-%m-%dT%H:%M:%SZ")
        with mock.patch.object(self.job.time, "gmtime", return_value=at):
            self.job.Progress(str(path), every=1.0).after_step(1234, force=True)
        written = json.loads(path.read_text())
        self.assertIsInstance(written.pop("pid"), int)  # the job's own key, for remove()
        self.assertEqual(written, json.loads(golden("progress.json")))

    def test_a_checkpoint_is_said_at_once_with_its_step(self):
        path = self.tmp / "progress"
        at = time.strptime("2026-11-24T08:16:41Z", "%Y-%m-%dT%H:%M:%SZ")
        with mock.patch.object(self.job.time, "gmtime", return_value=at):
            progress = self.job.Progress(str(path), every=3600.0)
            progress.checkpointed(1200)
            progress.after_step(1234, force=True)
        written = json.loads(path.read_text())
        written.pop("pid")
        self.assertEqual(written, json.loads(golden("progress_checkpoint.json")))


class NoticesTest(GoldenTest):
    def read(self, generation):
        generation_file = self.tmp / "generation"
        generation_file.write_text(f"{generation}\n")
        args = SimpleNamespace(notices=str(GOLDEN / "notices.json"),
                               generation_file=str(generation_file))
        return self.job.read_notices(args)

    def test_the_golden_notices_read_as_dtd_meant_them(self):
        notices = self.read(json.loads(golden("notices.json"))["generation"])
        deadline = datetime.datetime(2026, 11, 24, 8, 16, 41, tzinfo=datetime.timezone.utc).timestamp()
        self.assertEqual(notices, [
            {"ip": "10.0.1.5", "kind": "interruption", "deadline": deadline},
            {"ip": "10.0.1.6", "kind": "unhealthy", "deadline": None},
        ])

    def test_another_generations_notices_are_not_this_ones(self):
        self.assertIsNone(self.read(json.loads(golden("notices.json"))["generation"] + 1))


if __name__ == "__main__":
    unittest.main()
