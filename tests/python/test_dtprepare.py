"""Unit tests of prepare-data/dtprepare.py, the module the example prepare-data scripts share:
markers written whole and as JSON, the output tail bounded, and no marker under `dtd agent`.

Run from the repository root: python3 -m unittest discover -s tests/python -v
"""
import argparse
import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path
from unittest import mock

ROOT = Path(__file__).resolve().parents[2]
PREPARE_DATA = ROOT / "prepare-data"
sys.path.insert(0, str(PREPARE_DATA))
import dtprepare  # noqa: E402  (found only once prepare-data/ is on the path)

IP = "10.0.9.1"


def quietly(fn, *args):
    """Calls fn, returning its result and what it printed to stdout and stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        result = fn(*args)
    return result, out.getvalue(), err.getvalue()


class TempDirTest(unittest.TestCase):
    def setUp(self):
        self.dir = Path(tempfile.mkdtemp(prefix="dt-dtprepare-test."))
        self.addCleanup(shutil.rmtree, self.dir, ignore_errors=True)


class MarkerTest(TempDirTest):
    def test_success_marker_is_json_readable_by_others_and_drops_the_failed_one(self):
        (self.dir / f"prepare_data_failed_{IP}").write_text("{}")
        path = dtprepare.write_marker(str(self.dir), IP, True, {"ip": IP, "files": 3})
        self.assertEqual(path, str(self.dir / f"prepare_data_success_{IP}"))
        text = Path(path).read_text()
        self.assertTrue(text.endswith("\n"))
        self.assertEqual(json.loads(text), {"ip": IP, "files": 3})
        self.assertEqual(os.stat(path).st_mode & 0o777, 0o644)
        self.assertEqual(os.listdir(self.dir), [f"prepare_data_success_{IP}"])

    def test_failure_marker_drops_the_success_one(self):
        dtprepare.write_marker(str(self.dir), IP, True, {})
        dtprepare.write_marker(str(self.dir), IP, False, {"exit_code": 1})
        self.assertEqual(os.listdir(self.dir), [f"prepare_data_failed_{IP}"])

    def test_a_failed_write_keeps_the_old_file_and_leaves_no_temp_file(self):
        path = self.dir / "marker"
        dtprepare.atomic_write(str(path), b"old\n")
        with self.assertRaises(TypeError):
            dtprepare.atomic_write(str(path), "not bytes")
        self.assertEqual(path.read_bytes(), b"old\n")
        self.assertEqual(os.listdir(self.dir), ["marker"])


class OutputTest(unittest.TestCase):
    def test_lines_are_prefixed_and_the_tail_keeps_only_the_last(self):
        output = dtprepare.Output("[t]", limit=3)
        _, out, _ = quietly(lambda: [output.say(f"line {n}") for n in range(5)])
        self.assertEqual(out.splitlines(), [f"[t] line {n}" for n in range(5)])
        self.assertEqual(list(output.tail), ["[t] line 2", "[t] line 3", "[t] line 4"])

    def test_the_default_limit_is_what_dtd_agent_keeps(self):
        output = dtprepare.Output("[t]")
        quietly(lambda: [output.say(n) for n in range(50)])
        self.assertEqual(len(output.tail), 20)
        self.assertEqual(output.tail[-1], "[t] 49")

    def test_a_multi_line_message_counts_as_its_lines(self):
        output = dtprepare.Output("[t]", limit=2)
        _, _, err = quietly(lambda: output.say("a\nb\nc", sys.stderr))
        self.assertEqual(err, "[t] a\n[t] b\n[t] c\n")
        self.assertEqual(list(output.tail), ["[t] b", "[t] c"])


class RunTest(TempDirTest):
    def args(self, ip=IP):
        return argparse.Namespace(shared_dir=str(self.dir), ip=ip, attempts=4)

    def run_with(self, prepare, agent, ip=IP):
        output = dtprepare.Output("[t]")
        env = {"DT_AGENT": "1"} if agent else {}
        with mock.patch.dict(os.environ, env, clear=True):
            code, out, err = quietly(dtprepare.run, prepare, self.args(ip), output)
        return code, out, err

    @staticmethod
    def fail(_args):
        raise dtprepare.Failure("no data")

    def test_by_hand_success_writes_the_marker_with_its_duration(self):
        code, out, _ = self.run_with(lambda a: {"path": "/data"}, agent=False)
        self.assertEqual(code, 0)
        self.assertEqual(out.splitlines()[-1], "[t] ready: /data")
        marker = json.loads((self.dir / f"prepare_data_success_{IP}").read_text())
        self.assertEqual(marker["path"], "/data")
        self.assertIsInstance(marker["duration_s"], float)

    def test_by_hand_failure_writes_the_marker_and_ends_with_the_reason(self):
        code, _, err = self.run_with(self.fail, agent=False)
        self.assertEqual(code, 1)
        self.assertEqual(err.splitlines()[-1], "[t] error: no data")
        marker = json.loads((self.dir / f"prepare_data_failed_{IP}").read_text())
        self.assertEqual((marker["exit_code"], marker["attempts"]), (1, 4))
        self.assertEqual(marker["output_tail"], ["[t] error: no data"])

    def test_under_dtd_agent_no_marker_is_written(self):
        for prepare, expected in ((lambda a: {"path": "/data"}, 0), (self.fail, 1)):
            code, _, _ = self.run_with(prepare, agent=True, ip=None)
            self.assertEqual(code, expected)
            self.assertEqual(os.listdir(self.dir), [])

    def test_the_ip_is_required_only_by_hand(self):
        parser = argparse.ArgumentParser(prog="t")
        with mock.patch.dict(os.environ, {"DT_AGENT": "1"}, clear=True):
            dtprepare.check_ip(parser, self.args(ip=None))
        with mock.patch.dict(os.environ, {}, clear=True), self.assertRaises(SystemExit) as e:
            quietly(dtprepare.check_ip, parser, self.args(ip=None))
        self.assertEqual(e.exception.code, 2)


class DeployedTest(TempDirTest):
    def test_a_script_runs_as_prepare_data_py_with_dtprepare_beside_it(self):
        # What the README has a user do: the files on the shared directory, the script executable.
        program = self.dir / "prepare-data.py"
        shutil.copy(PREPARE_DATA / "synthetic.py", program)
        shutil.copy(PREPARE_DATA / "dtprepare.py", self.dir)
        shutil.copy(PREPARE_DATA / "dt_atomic.py", self.dir)
        program.chmod(0o755)
        env = {**os.environ, "DT_AGENT": "1", "DT_IP": IP, "DT_SHARED_DIR": str(self.dir)}
        r = subprocess.run([str(program), "--samples", "3"], cwd="/", env=env,
                           capture_output=True, text=True, timeout=30, check=False)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.splitlines()[-1], "[synthetic] ready (dtd agent writes the marker)")


if __name__ == "__main__":
    unittest.main()
