"""Black-box tests of the two example scripts a user runs next to the daemon.

examples/elastic_job.py (the elastic training job) and prepare-data/synthetic.py (the example
prepare-data script) run as subprocesses in temporary directories; every test asserts what a user
or the daemon sees: printed lines, exit codes, and the files on the "shared file system".

Run from the repository root: python3 -m unittest discover -s tests/python -v
"""
import hashlib
import json
import os
import re
import signal
import stat
import subprocess
import sys
import tempfile
import time
import unittest
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[2]
JOB = ROOT / "examples" / "elastic_job.py"
SYNTHETIC = ROOT / "prepare-data" / "synthetic.py"

TIMEOUT = 10.0  # seconds for anything we wait for; a healthy run needs a small fraction of it
POLL = 0.01

EPOCH_RE = re.compile(r"^\[elastic_job\] epoch (\d+) loss (\d+\.\d+) workers (\d+) ", re.M)
LOG_RE = re.compile(r"^(\d+) (ADDED|REMOVED) (\S+) (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)$")


def write_atomically(path, text):
    """As the daemon rewrites a host file: temp file in the same directory, then rename."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


class ScriptTest(unittest.TestCase):
    def setUp(self):
        tmp = tempfile.TemporaryDirectory(prefix="dtd-examples-test.")
        self.addCleanup(tmp.cleanup)  # cleanups run after tearDown: children are dead by then
        self.root = Path(tmp.name)
        self.shared = self.root / "shared"
        self.shared.mkdir()
        self.procs = []

    def tearDown(self):
        for p in self.procs:
            if p.popen.poll() is None:
                p.popen.kill()
            p.popen.wait(timeout=5)
            p.stdout_file.close()
            p.stderr_file.close()

    def spawn(self, script, args, name):
        out = self.root / f"{name}.{len(self.procs)}.stdout"
        err = self.root / f"{name}.{len(self.procs)}.stderr"
        p = SimpleNamespace(stdout_path=out, stderr_path=err,
                            stdout_file=open(out, "w"), stderr_file=open(err, "w"))
        p.popen = subprocess.Popen([sys.executable, str(script), *map(str, args)],
                                   stdin=subprocess.DEVNULL, stdout=p.stdout_file,
                                   stderr=p.stderr_file, cwd=self.root)
        p.pid = p.popen.pid
        p.out = lambda: out.read_text()
        p.err = lambda: err.read_text()
        self.procs.append(p)
        return p

    def run_script(self, script, args, env=None):
        """Run to completion: (exit code, stdout, stderr). `env` adds to a clean DT_* slate."""
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("DT_")}
        full_env.update(env or {})
        r = subprocess.run([sys.executable, str(script), *map(str, args)],
                           stdin=subprocess.DEVNULL, capture_output=True, text=True,
                           timeout=TIMEOUT, cwd=self.root, env=full_env)
        return r.returncode, r.stdout, r.stderr

    def wait_for(self, predicate, what, proc=None):
        """Poll `predicate` until it returns something truthy (returned), or fail at a deadline."""
        deadline = time.monotonic() + TIMEOUT
        while True:
            value = predicate()
            if value:
                return value
            if proc is not None and proc.popen.poll() is not None:
                value = predicate()  # the last output may have landed just before the exit
                if value:
                    return value
                self.fail(f"process exited ({proc.popen.returncode}) before {what}\n"
                          f"stdout:\n{proc.out()}\nstderr:\n{proc.err()}")
            if time.monotonic() > deadline:
                detail = f"\nstdout:\n{proc.out()}\nstderr:\n{proc.err()}" if proc else ""
                self.fail(f"timed out after {TIMEOUT}s waiting for {what}{detail}")
            time.sleep(POLL)

    def wait_exit(self, proc):
        try:
            return proc.popen.wait(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            self.fail(f"process did not exit within {TIMEOUT}s\nstdout:\n{proc.out()}\n"
                      f"stderr:\n{proc.err()}")


class ElasticJobTest(ScriptTest):
    def setUp(self):
        super().setUp()
        self.hostfile = self.shared / "host_worker"
        self.log = self.shared / "host_worker_log"
        self.pidfile = self.shared / "job.pid"
        self.checkpoint = self.shared / "checkpoint.json"

    def start(self, *extra):
        return self.spawn(JOB, ["--shared-dir", self.shared, "--step-time", "0.01",
                                "--steps-per-epoch", "5", *extra], "job")

    def wait_line(self, proc, text):
        return self.wait_for(lambda: text in proc.out(), f"output line {text!r}", proc)

    def epochs(self, text):
        """[(epoch, loss, workers)] of the `epoch E loss L workers N [...]` lines."""
        return [(int(e), float(loss), int(n)) for e, loss, n in EPOCH_RE.findall(text)]

    def wait_epochs(self, proc, count):
        return self.wait_for(lambda: len(self.epochs(proc.out())) >= count and
                             self.epochs(proc.out()), f"{count} epoch lines", proc)

    def log_records(self):
        """[(seq, action, ip)] of host_worker_log; fails on any line that is not a record."""
        records = []
        for line in self.log.read_text().splitlines():
            m = LOG_RE.match(line)
            self.assertIsNotNone(m, f"malformed host_worker_log line {line!r}")
            records.append((int(m[1]), m[2], m[3]))
        return records

    def wait_log(self, count, proc):
        return self.wait_for(lambda: self.log.exists() and
                             len(self.log.read_text().splitlines()) >= count and
                             self.log_records(), f"{count} host_worker_log lines", proc)

    def terminate(self, proc):
        proc.popen.send_signal(signal.SIGTERM)
        return self.wait_exit(proc)

    def test_pidfile_and_decreasing_loss(self):
        self.hostfile.write_text("10.0.0.1\n10.0.0.2\n")
        job = self.start()
        self.wait_for(lambda: self.pidfile.exists() and self.pidfile.read_text(),
                      "the pidfile", job)
        self.assertEqual(self.pidfile.read_text(), f"{job.pid}\n")
        self.wait_line(job, "[elastic_job] start: 2 workers ['10.0.0.1', '10.0.0.2']")
        epochs = self.wait_epochs(job, 4)[:4]
        self.assertEqual([e for e, _, _ in epochs], [1, 2, 3, 4])
        self.assertEqual({n for _, _, n in epochs}, {2})
        losses = [loss for _, loss, _ in epochs]
        for before, after in zip(losses, losses[1:]):
            self.assertLess(after, before, f"loss did not decrease: {losses}")
        # Starting acknowledges the initial membership in the 2018 log.
        self.assertEqual(self.wait_log(2, job),
                         [(1, "ADDED", "10.0.0.1"), (2, "ADDED", "10.0.0.2")])
        self.assertEqual(self.terminate(job), 0)

    def test_host_file_formats_are_read(self):
        # mxnet, mpi/deepspeed and horovod lines, a comment, and one bad line (warned, skipped).
        self.hostfile.write_text("# hosts\n10.0.0.1\n10.0.0.2 slots=4\n10.0.0.3:8\n"
                                 "[2001:DB8::1]:2\nnot-an-ip\n10.0.0.1\nfe80::1%eth0\n")
        job = self.start()
        self.wait_line(job, "start: 4 workers "
                       "['10.0.0.1', '10.0.0.2', '10.0.0.3', '2001:db8::1']")
        self.wait_for(lambda: "skipped" in job.err(), "a warning about the bad line", job)
        self.assertIn(f"{self.hostfile}:6: skipped", job.err())
        self.assertIn(f"{self.hostfile}:8: skipped", job.err())  # a scoped IPv6 address
        self.assertEqual(self.terminate(job), 0)

    def test_waits_for_the_host_file(self):
        job = self.start()
        self.wait_line(job, f"[elastic_job] waiting for host file {self.hostfile} ...")
        self.assertEqual(self.epochs(job.out()), [])
        write_atomically(self.hostfile, "10.0.0.9\n")
        self.wait_line(job, "start: 1 workers ['10.0.0.9']")
        self.wait_epochs(job, 1)
        self.assertEqual(self.terminate(job), 0)

    def test_sigterm_while_waiting_for_the_host_file(self):
        job = self.start()
        self.wait_line(job, "waiting for host file")
        self.assertEqual(self.terminate(job), 0)
        self.assertFalse(self.pidfile.exists())
        self.assertEqual(job.err(), "")

    def test_rescale_on_sigusr1_appends_to_log(self):
        self.hostfile.write_text("10.0.0.1\n10.0.0.2\n")
        job = self.start()
        self.wait_line(job, "start: 2 workers")
        self.wait_log(2, job)

        write_atomically(self.hostfile, "10.0.0.1\n10.0.0.2\n10.0.0.3\n")
        job.popen.send_signal(signal.SIGUSR1)
        self.wait_line(job, "[elastic_job] rescale: +[10.0.0.3] -[] -> 3 workers")
        self.assertEqual(self.wait_log(3, job)[2], (3, "ADDED", "10.0.0.3"))
        # Training goes on with the new membership.
        self.wait_for(lambda: any(n == 3 for _, _, n in self.epochs(job.out())),
                      "an epoch with 3 workers", job)

        write_atomically(self.hostfile, "10.0.0.2\n10.0.0.3\n")
        job.popen.send_signal(signal.SIGUSR1)
        self.wait_line(job, "[elastic_job] rescale: +[] -[10.0.0.1] -> 2 workers")
        self.assertEqual(self.wait_log(4, job),
                         [(1, "ADDED", "10.0.0.1"), (2, "ADDED", "10.0.0.2"),
                          (3, "ADDED", "10.0.0.3"), (4, "REMOVED", "10.0.0.1")])
        self.assertEqual(self.terminate(job), 0)
        self.assertEqual(len(self.log_records()), 4)

    def removal_with_notices(self, notices, generation="8"):
        """Starts the job on three workers, then removes 10.0.0.1 with `notices` (text, or
        None for no file) for `generation`; returns the job and its line after the rescale."""
        gen = self.shared / "generation"
        gen.write_text("7\n")
        self.hostfile.write_text("10.0.0.1\n10.0.0.2\n10.0.0.3\n")
        job = self.start("--steps-per-epoch", "100000")
        self.wait_line(job, "start: 3 workers")
        if notices is not None:
            write_atomically(self.shared / "notices", notices)
        write_atomically(self.hostfile, "10.0.0.2\n10.0.0.3\n")
        write_atomically(gen, f"{generation}\n")
        job.popen.send_signal(signal.SIGUSR1)
        rescaled = "rescale: +[] -[10.0.0.1] -> 2 workers\n"
        self.wait_for(lambda: rescaled in job.out() and
                      job.out().split(rescaled, 1)[1].strip(), "the line after the rescale", job)
        return job, job.out().split(rescaled, 1)[1].splitlines()[0]

    @staticmethod
    def notices(deadline_in, generation=8, ip="10.0.0.1"):
        at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + deadline_in))
        return json.dumps({"generation": generation, "notices": [
            {"ip": ip, "kind": "interruption", "deadline": at}]})

    def test_a_deadline_before_the_next_checkpoint_checkpoints_at_once(self):
        # Epochs of 100,000 steps of 10 ms: the next checkpoint is 1,000 s away.
        job, line = self.removal_with_notices(self.notices(120))
        self.assertRegex(line, r"checkpoint at step \d+ \(epoch 0\) before the deadline: "
                               r"interruption of 10\.0\.0\.1 in 1[12]\ds")
        self.assertTrue(self.checkpoint.exists())
        self.assertEqual(self.terminate(job), 0)

    def test_a_deadline_after_the_next_checkpoint_waits_for_it(self):
        job, line = self.removal_with_notices(self.notices(3600))
        self.assertIn("deadline: interruption of 10.0.0.1 in 3", line)
        self.assertIn("comes first", line)
        self.assertFalse(self.checkpoint.exists(), "no extra checkpoint")
        self.assertEqual(self.terminate(job), 0)

    def test_notices_of_another_generation_or_unreadable_mean_a_checkpoint_now(self):
        job, line = self.removal_with_notices(self.notices(3600, generation=7))
        self.assertIn("after a removal", line)
        self.assertEqual(self.terminate(job), 0)
        self.checkpoint.unlink()
        (self.shared / "notices").unlink()
        os.mkfifo(self.shared / "notices")  # a worker's FIFO must not block the job
        job, _ = self.removal_with_notices(None)
        self.wait_line(job, "after a removal")
        self.assertEqual(self.terminate(job), 0)

    def test_ack_file_gets_the_generation(self):
        ack = self.shared / "ack"
        generation = self.shared / "generation"
        self.hostfile.write_text("10.0.0.1\n10.0.0.2\n")
        generation.write_text("7\n")
        job = self.start("--ack", "file")
        self.wait_for(lambda: ack.exists() and ack.read_text() == "7\n", "ack 7", job)

        write_atomically(self.hostfile, "10.0.0.1\n10.0.0.2\n10.0.0.3\n")
        write_atomically(generation, "8\n")
        job.popen.send_signal(signal.SIGUSR1)
        self.wait_line(job, "rescale: +[10.0.0.3] -[] -> 3 workers")
        self.wait_for(lambda: ack.read_text() == "8\n", "ack 8", job)
        self.assertEqual(self.terminate(job), 0)
        self.assertFalse(self.log.exists(), "--ack file must not write host_worker_log")

    def test_sigterm_checkpoints_and_removes_pidfile(self):
        self.hostfile.write_text("10.0.0.1\n10.0.0.2\n")
        job = self.start()
        self.wait_epochs(job, 1)
        self.assertTrue(self.pidfile.exists())
        self.assertEqual(self.terminate(job), 0)
        self.assertFalse(self.pidfile.exists(), "pidfile left behind after SIGTERM")
        m = re.search(r"^\[elastic_job\] stopped at epoch (\d+) step (\d+)$", job.out(), re.M)
        self.assertIsNotNone(m, job.out())
        state = json.loads(self.checkpoint.read_text())
        self.assertEqual((state["epoch"], state["global_step"]), (int(m[1]), int(m[2])))
        self.assertGreaterEqual(state["epoch"], 1)
        self.assertEqual(state["workers"], ["10.0.0.1", "10.0.0.2"])
        self.assertEqual(job.err(), "")

    def progress(self):
        """The progress file's line, or None while there is none."""
        try:
            return json.loads((self.shared / "progress").read_text())
        except FileNotFoundError:
            return None

    def test_progress_file_reports_the_step_and_is_removed_on_a_clean_stop(self):
        self.hostfile.write_text("10.0.0.1\n")
        # No checkpoint within the test (the last --steps-per-epoch wins): the line has exactly
        # these keys at whichever step the test first sees.
        job = self.start("--progress-every", "0", "--steps-per-epoch", "100000")
        first = self.wait_for(lambda: (p := self.progress()) and p["step"] >= 3 and p,
                              "step 3 in the progress file", job)
        self.assertEqual(set(first), {"step", "time", "pid"})
        self.assertEqual(first["pid"], job.pid)
        self.assertRegex(first["time"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")
        self.wait_for(lambda: (p := self.progress()) and p["step"] > first["step"],
                      "the step to advance", job)
        self.assertEqual(self.terminate(job), 0)
        self.assertIsNone(self.progress(), "a job stopped on purpose is not stalled")
        # Written atomically: once the job is gone no temp file is left beside it (while it
        # runs, one may be there between two renames).
        self.assertEqual([f.name for f in self.shared.iterdir() if "progress" in f.name], [])

    def test_progress_is_written_at_most_every_so_often_from_the_resumed_step(self):
        self.hostfile.write_text("10.0.0.1\n")
        first = self.start("--epochs", "1")
        self.assertEqual(self.wait_exit(first), 0)
        self.assertIsNone(self.progress(), "removed when training ended")
        job = self.start("--progress-every", "600")
        self.wait_line(job, "resumed from epoch 1")
        self.wait_epochs(job, 2)
        # Written at the start, where the checkpoint left off, and at each checkpoint (an epoch's
        # end, said at once for join.at_checkpoint): not after every step.
        p = self.progress()
        self.assertEqual(p["step"], p["checkpoint_step"], p)
        self.assertEqual(p["step"] % 5, 0, p)
        # Another job's progress is left alone at the end.
        write_atomically(self.shared / "progress", '{"step": 9, "pid": 999999}\n')
        self.assertEqual(self.terminate(job), 0)
        self.assertEqual(self.progress(), {"step": 9, "pid": 999999})

    def test_pidfile_of_another_job_is_left_alone(self):
        self.hostfile.write_text("10.0.0.1\n")
        job = self.start()
        self.wait_line(job, "start: 1 workers")
        # A newer job took over the pidfile: the old one must not delete it on exit.
        write_atomically(self.pidfile, "999999\n")
        self.assertEqual(self.terminate(job), 0)
        self.assertEqual(self.pidfile.read_text(), "999999\n")

    def test_restart_resumes_from_checkpoint(self):
        self.hostfile.write_text("10.0.0.1\n10.0.0.2\n")
        first = self.start("--epochs", "2")
        self.assertEqual(self.wait_exit(first), 0)
        first_epochs = self.epochs(first.out())
        self.assertEqual([e for e, _, _ in first_epochs], [1, 2])
        self.assertEqual(json.loads(self.checkpoint.read_text())["epoch"], 2)

        second = self.start("--epochs", "4")
        self.assertEqual(self.wait_exit(second), 0)
        self.assertIn("[elastic_job] resumed from epoch 2\n", second.out())
        second_epochs = self.epochs(second.out())
        self.assertEqual([e for e, _, _ in second_epochs], [3, 4])
        # It continued from the saved weights rather than from scratch.
        self.assertLess(second_epochs[0][1], first_epochs[-1][1])
        self.assertEqual(json.loads(self.checkpoint.read_text())["epoch"], 4)
        # The log already held this membership: nothing is appended a second time.
        self.assertEqual(self.log_records(),
                         [(1, "ADDED", "10.0.0.1"), (2, "ADDED", "10.0.0.2")])

    def test_corrupt_checkpoint_is_reported_and_moved_aside(self):
        self.hostfile.write_text("10.0.0.1\n")
        self.checkpoint.write_text('{"weights": [0.1, ')
        job = self.start("--epochs", "1")
        self.assertEqual(self.wait_exit(job), 0)
        self.assertIn(f"checkpoint {self.checkpoint} is corrupt", job.err())
        aside = self.shared / "checkpoint.json.corrupt"
        self.assertIn(f"moved to {aside}", job.err())
        self.assertEqual(aside.read_text(), '{"weights": [0.1, ')
        self.assertNotIn("resumed", job.out())
        self.assertEqual([e for e, _, _ in self.epochs(job.out())], [1])
        self.assertEqual(json.loads(self.checkpoint.read_text())["epoch"], 1)

    def test_truncated_last_log_line(self):
        stamp = "2024-01-01 00:00:00"
        # A crash cut the third record short: it is not a record, but its SEQ is taken.
        self.log.write_text(f"1 ADDED 10.0.0.1 {stamp}\n2 ADDED 10.0.0.2 {stamp}\n"
                            "3 ADDED 10.0.0.3 2024-01-0")
        self.hostfile.write_text("10.0.0.1\n10.0.0.2\n10.0.0.3\n")
        job = self.start()
        self.wait_line(job, "start: 3 workers")
        self.wait_for(lambda: len(self.log.read_text().splitlines()) >= 4, "a new log line", job)
        self.assertEqual(self.terminate(job), 0)
        text = self.log.read_text()
        self.assertTrue(text.endswith("\n"))
        lines = text.splitlines()
        self.assertEqual(lines[:3], [f"1 ADDED 10.0.0.1 {stamp}", f"2 ADDED 10.0.0.2 {stamp}",
                                     "3 ADDED 10.0.0.3 2024-01-0"])
        self.assertEqual(len(lines), 4, text)
        m = LOG_RE.match(lines[3])
        self.assertIsNotNone(m, f"new record not on a line of its own: {lines[3]!r}")
        self.assertEqual((int(m[1]), m[2], m[3]), (4, "ADDED", "10.0.0.3"))

    def test_bad_arguments_exit_2_with_one_line(self):
        cases = {
            "no --shared-dir": [],
            "missing shared dir": ["--shared-dir", self.root / "nope"],
            "unknown option": ["--shared-dir", self.shared, "--bogus"],
            "bad --ack": ["--shared-dir", self.shared, "--ack", "email"],
            "negative --epochs": ["--shared-dir", self.shared, "--epochs", "-1"],
            "zero --steps-per-epoch": ["--shared-dir", self.shared, "--steps-per-epoch", "0"],
            "non-number --step-time": ["--shared-dir", self.shared, "--step-time", "fast"],
            "NaN --step-time": ["--shared-dir", self.shared, "--step-time", "nan"],
            "infinite --step-time": ["--shared-dir", self.shared, "--step-time", "inf"],
            "NaN --lr": ["--shared-dir", self.shared, "--lr", "nan"],
            "pidfile in a missing dir": ["--shared-dir", self.shared,
                                         "--pidfile", self.root / "nope" / "job.pid"],
        }
        for name, argv in cases.items():
            with self.subTest(name):
                code, out, err = self.run_script(JOB, argv)
                self.assertEqual(code, 2, err)
                self.assertEqual(out, "")
                self.assertEqual(len(err.splitlines()), 1, err)
                self.assertIn("error", err)
                self.assertEqual(list(self.shared.iterdir()), [])

    def test_checkpoint_with_other_features_exits_2(self):
        self.hostfile.write_text("10.0.0.1\n")
        checkpoint = json.dumps({"weights": [0.0] * 8, "bias": 0.0, "epoch": 3,
                                 "step_in_epoch": 0, "global_step": 60})
        self.checkpoint.write_text(checkpoint)
        code, out, err = self.run_script(JOB, ["--shared-dir", self.shared, "--features", "3"])
        self.assertEqual(code, 2, err)
        self.assertEqual(err, f"[elastic_job] error: checkpoint {self.checkpoint} has 8 "
                              "features, --features 3\n")
        self.assertEqual(self.checkpoint.read_text(), checkpoint)  # left untouched
        self.assertFalse(self.pidfile.exists())


class SyntheticTest(ScriptTest):
    def marker(self, kind, ip):
        return self.shared / f"prepare_data_{kind}_{ip}"

    def test_success_writes_marker_and_data(self):
        code, out, err = self.run_script(SYNTHETIC, ["--shared-dir", self.shared,
                                                     "--ip", "10.0.0.5", "--samples", "50"])
        self.assertEqual(code, 0, err)
        marker = self.marker("success", "10.0.0.5")
        self.assertIn(f"[synthetic] ready: {marker}", out)
        body = json.loads(marker.read_text())
        self.assertEqual((body["ip"], body["samples"]), ("10.0.0.5", 50))
        data = (self.shared / "data" / "synthetic-10.0.0.5.csv").read_bytes()
        self.assertEqual(body["sha256"], hashlib.sha256(data).hexdigest())
        self.assertEqual(len(data.splitlines()), 51)  # header + samples
        self.assertIsInstance(body["duration_s"], (int, float))
        self.assertEqual(stat.S_IMODE(marker.stat().st_mode), 0o644)  # readable by the daemon
        self.assertFalse(self.marker("failed", "10.0.0.5").exists())

    def test_same_ip_same_data(self):
        argv = ["--shared-dir", self.shared, "--ip", "10.0.0.5", "--samples", "20"]
        self.assertEqual(self.run_script(SYNTHETIC, argv)[0], 0)
        first = json.loads(self.marker("success", "10.0.0.5").read_text())["sha256"]
        self.assertEqual(self.run_script(SYNTHETIC, argv)[0], 0)
        second = json.loads(self.marker("success", "10.0.0.5").read_text())["sha256"]
        self.assertEqual(first, second)
        self.assertEqual(self.run_script(SYNTHETIC, [*argv[:3], "10.0.0.6", *argv[4:]])[0], 0)
        other = json.loads(self.marker("success", "10.0.0.6").read_text())["sha256"]
        self.assertNotEqual(first, other)

    def test_fail_writes_failed_marker_and_drops_stale_success(self):
        argv = ["--shared-dir", self.shared, "--ip", "10.0.0.7", "--samples", "10"]
        self.assertEqual(self.run_script(SYNTHETIC, argv)[0], 0)
        self.assertTrue(self.marker("success", "10.0.0.7").exists())

        code, out, err = self.run_script(SYNTHETIC, [*argv, "--fail"])
        self.assertEqual(code, 1)
        failed = self.marker("failed", "10.0.0.7")
        body = json.loads(failed.read_text())
        self.assertEqual(body["exit_code"], 1)
        self.assertEqual(body["attempts"], 1)
        self.assertIsInstance(body["duration_s"], (int, float))
        self.assertIsInstance(body["output_tail"], list)
        self.assertTrue(any("simulated failure" in line for line in body["output_tail"]), body)
        self.assertIn("simulated failure", err)
        self.assertFalse(self.marker("success", "10.0.0.7").exists(),
                         "a stale success marker survived a failed run")

        # And a later success drops the failure marker.
        self.assertEqual(self.run_script(SYNTHETIC, argv)[0], 0)
        self.assertTrue(self.marker("success", "10.0.0.7").exists())
        self.assertFalse(failed.exists())

    def test_invalid_ip_exits_2_and_writes_nothing(self):
        for ip in ["../etc/passwd", "10.0.0.300", "fe80::1%eth0", "", "10.0.0.1/24"]:
            with self.subTest(ip=ip):
                code, out, err = self.run_script(SYNTHETIC, ["--shared-dir", self.shared,
                                                             "--ip", ip])
                self.assertEqual(code, 2, err)
                self.assertEqual(len(err.splitlines()), 1, err)
                self.assertIn("not an IPv4/IPv6 address", err)
                self.assertEqual(out, "")
                self.assertEqual(list(self.shared.iterdir()), [])
        self.assertFalse((self.root / "etc").exists())

    def test_bad_arguments_exit_2(self):
        cases = {
            "missing shared dir": ["--shared-dir", self.root / "nope", "--ip", "10.0.0.1"],
            "no --ip": ["--shared-dir", self.shared],
            "zero samples": ["--shared-dir", self.shared, "--ip", "10.0.0.1", "--samples", "0"],
            "NaN --sleep": ["--shared-dir", self.shared, "--ip", "10.0.0.1", "--sleep", "nan"],
        }
        for name, argv in cases.items():
            with self.subTest(name):
                code, out, err = self.run_script(SYNTHETIC, argv)
                self.assertEqual(code, 2, err)
                self.assertEqual(len(err.splitlines()), 1, err)
                self.assertEqual(list(self.shared.iterdir()), [])

    def test_ipv6_is_normalized(self):
        code, out, err = self.run_script(SYNTHETIC, ["--shared-dir", self.shared,
                                                     "--ip", "2001:DB8:0:0::0:1",
                                                     "--samples", "10"])
        self.assertEqual(code, 0, err)
        marker = self.marker("success", "2001:db8::1")
        self.assertEqual(json.loads(marker.read_text())["ip"], "2001:db8::1")
        self.assertTrue((self.shared / "data" / "synthetic-2001:db8::1.csv").exists())
        self.assertEqual(sorted(p.name for p in self.shared.iterdir()),
                         ["data", "prepare_data_success_2001:db8::1"])

    def agent_env(self, ip="10.0.0.9"):
        """What `dtd agent` puts in the environment of the prepare-data program it runs."""
        return {"DT_AGENT": "1", "DT_IP": ip, "DT_SHARED_DIR": str(self.shared),
                "DT_INSTANCE_ID": "i-0abc", "DT_CLUSTER": "demo", "DT_ATTEMPT": "1"}

    def test_under_dtd_agent_the_agent_writes_the_markers(self):
        code, out, err = self.run_script(SYNTHETIC, ["--samples", "10"], env=self.agent_env())
        self.assertEqual(code, 0, err)
        self.assertIn("[synthetic] ready (dtd agent writes the marker)", out)
        self.assertEqual(sorted(p.name for p in self.shared.iterdir()), ["data"])
        self.assertEqual(len((self.shared / "data" / "synthetic-10.0.0.9.csv")
                             .read_bytes().splitlines()), 11)

        code, out, err = self.run_script(SYNTHETIC, ["--fail"], env=self.agent_env())
        self.assertEqual(code, 1)
        self.assertIn("simulated failure", err)
        self.assertEqual(sorted(p.name for p in self.shared.iterdir()), ["data"])

    def test_under_dtd_agent_the_environment_ip_is_validated(self):
        code, out, err = self.run_script(SYNTHETIC, [], env=self.agent_env(ip="../etc"))
        self.assertEqual(code, 2, err)
        self.assertIn("not an IPv4/IPv6 address", err)
        self.assertEqual(list(self.shared.iterdir()), [])


if __name__ == "__main__":
    unittest.main()
