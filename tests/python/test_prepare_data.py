"""Black-box tests of the example prepare-data scripts prepare-data/cifar10.py and s3_sync.py.

cifar10.py downloads from a local HTTP server (a thread of this test) serving a small archive in
CIFAR-10's layout, which can fail on purpose; s3_sync.py copies from moto's S3 (moto_server from
.venv, on a loopback port) with the real AWS CLI. Every test asserts what the daemon or a user
sees: the exit code, the last line, the unpacked files and the markers.

Run from the repository root: python3 -m unittest discover -s tests/python -v
"""
import hashlib
import http.server
import io
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import threading
import unittest
from pathlib import Path

import aws_emulator

ROOT = Path(__file__).resolve().parents[2]
CIFAR = ROOT / "prepare-data" / "cifar10.py"
S3_SYNC = ROOT / "prepare-data" / "s3_sync.py"
AWS = aws_emulator.AWS
IP = "10.0.3.7"


def fake_cifar_archive(extra_member=None):
    """A .tar.gz with CIFAR-10's layout (cifar-10-batches-py/...), a few bytes per file."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        names = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch", "batches.meta"]
        for name in names:
            data = f"fake {name}\n".encode()
            info = tarfile.TarInfo(f"cifar-10-batches-py/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        if extra_member:
            data = b"x"
            info = tarfile.TarInfo(extra_member)
            info.size = 1
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


class Server:
    """Serves one archive at /cifar.tar.gz; the first `fail_first` requests get a 503."""

    def __init__(self, body):
        self.body = body
        self.fail_first = 0
        self.requests = 0
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                outer.requests += 1
                if outer.requests <= outer.fail_first:
                    self.send_error(503, "try again")
                    return
                self.send_response(200)
                self.send_header("Content-Length", str(len(outer.body)))
                self.end_headers()
                self.wfile.write(outer.body)

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/cifar.tar.gz"

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def run(script, args, env=None):
    full_env = {k: v for k, v in os.environ.items() if k != "DT_AGENT"}
    full_env.update(env or {})
    r = subprocess.run([sys.executable, str(script), *map(str, args)], capture_output=True,
                       text=True, timeout=120, env=full_env, stdin=subprocess.DEVNULL)
    return r.returncode, r.stdout, r.stderr


def last_line(text):
    lines = text.strip().splitlines()
    return lines[-1] if lines else ""


class Cifar10Test(unittest.TestCase):
    def setUp(self):
        tmp = tempfile.TemporaryDirectory(prefix="dt-cifar10-test.")
        self.addCleanup(tmp.cleanup)
        self.shared = Path(tmp.name)
        self.archive = fake_cifar_archive()
        self.server = Server(self.archive)
        self.addCleanup(self.server.close)
        self.sha256 = "sha256:" + hashlib.sha256(self.archive).hexdigest()

    def cifar(self, *extra, env=None):
        return run(CIFAR, ["--shared-dir", self.shared, "--url", self.server.url,
                           "--backoff", "0.05", *extra], env)

    def test_downloads_verifies_unpacks_and_writes_the_marker(self):
        code, out, err = self.cifar("--checksum", self.sha256, "--ip", IP)
        self.assertEqual(code, 0, err)
        unpacked = self.shared / "data" / "cifar-10-batches-py"
        self.assertEqual((unpacked / "data_batch_3").read_text(), "fake data_batch_3\n")
        self.assertEqual(len(list(unpacked.iterdir())), 7)
        marker = json.loads((self.shared / f"prepare_data_success_{IP}").read_text())
        self.assertEqual(marker["files"], 7)
        self.assertIn("sha256 verified", out)
        leftovers = [p.name for p in (self.shared / "data").iterdir() if p.name.startswith(".")]
        self.assertEqual(leftovers, [], "no temp files left behind")

        # A second worker on the same shared directory finds the data and downloads nothing.
        requests = self.server.requests
        code, out, _ = self.cifar("--checksum", self.sha256, "--ip", "10.0.3.8")
        self.assertEqual(code, 0)
        self.assertIn("already there", out)
        self.assertEqual(self.server.requests, requests)
        self.assertTrue((self.shared / "prepare_data_success_10.0.3.8").exists())

    def test_transient_errors_are_retried_with_backoff(self):
        self.server.fail_first = 2
        code, out, err = self.cifar("--checksum", self.sha256, "--ip", IP, "--attempts", "3")
        self.assertEqual(code, 0, err)
        self.assertEqual(self.server.requests, 3)
        self.assertIn("retrying in 0.05s", out)
        self.assertIn("retrying in 0.1s", out, "the pause doubles")

    def test_a_bad_checksum_fails_with_a_clear_last_line_and_a_failure_marker(self):
        wrong = "sha256:" + "0" * 64
        code, out, err = self.cifar("--checksum", wrong, "--ip", IP, "--attempts", "2")
        self.assertEqual(code, 1)
        self.assertEqual(self.server.requests, 2, "a corrupt download is retried")
        self.assertRegex(last_line(err), r"^\[cifar10\] error: download failed after 2 attempts: "
                                         r"checksum mismatch: sha256 [0-9a-f]{64}, expected 0{64}$")
        failed = json.loads((self.shared / f"prepare_data_failed_{IP}").read_text())
        self.assertEqual(failed["exit_code"], 1)
        self.assertIn("checksum mismatch", failed["output_tail"][-1])
        self.assertFalse((self.shared / "data" / "cifar-10-batches-py").exists())

    def test_under_the_agent_it_writes_no_marker(self):
        code, _, err = self.cifar("--checksum", self.sha256, env={"DT_AGENT": "1"})
        self.assertEqual(code, 0, err)
        self.assertTrue((self.shared / "data" / "cifar-10-batches-py").is_dir())
        code, _, err = self.cifar("--checksum", "md5:" + "0" * 32, "--attempts", "1", "--force",
                                  env={"DT_AGENT": "1"})
        self.assertEqual(code, 1)
        self.assertIn("checksum mismatch", last_line(err))
        self.assertEqual([p.name for p in self.shared.iterdir()], ["data"], "no markers")

    def test_an_archive_escaping_its_directory_is_refused(self):
        self.server.body = fake_cifar_archive(extra_member="../../evil")
        sha = "sha256:" + hashlib.sha256(self.server.body).hexdigest()
        code, _, err = self.cifar("--checksum", sha, "--ip", IP)
        self.assertEqual(code, 1)
        self.assertIn("outside cifar-10-batches-py/", last_line(err))
        self.assertFalse((self.shared.parent / "evil").exists())

    def test_bad_arguments(self):
        code, _, err = self.cifar("--checksum", "crc:12")
        self.assertEqual(code, 2)
        self.assertIn("ALGORITHM:HEX", err)
        code, _, err = run(CIFAR, ["--shared-dir", self.shared, "--url", "file:///etc/passwd",
                                   "--ip", IP])
        self.assertEqual(code, 2)
        self.assertIn("not an http(s) URL", err)
        code, _, err = self.cifar("--checksum", self.sha256)
        self.assertEqual(code, 2)
        self.assertIn("--ip is required", err)


class S3SyncTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.moto, cls.env = aws_emulator.start()

    @classmethod
    def tearDownClass(cls):
        cls.moto.kill()
        cls.moto.wait()

    def setUp(self):
        tmp = tempfile.TemporaryDirectory(prefix="dt-s3-sync-test.")
        self.addCleanup(tmp.cleanup)
        self.shared = Path(tmp.name) / "shared"
        self.shared.mkdir()
        self.source = Path(tmp.name) / "source"
        (self.source / "train").mkdir(parents=True)
        (self.source / "train" / "part-0").write_text("a,b\n1,2\n")
        (self.source / "labels.txt").write_text("cat\ndog\n")

    def aws(self, *args):
        env = dict(os.environ, **self.env)
        subprocess.run([str(AWS), *args], check=True, capture_output=True, env=env, timeout=60)

    def s3_sync(self, *args, env=None):
        return run(S3_SYNC, [*args, "--shared-dir", self.shared, "--aws", AWS,
                             "--backoff", "0.05"], dict(self.env, **(env or {})))

    def test_copies_the_prefix_and_writes_the_marker(self):
        self.aws("s3", "mb", "s3://dt-data")
        self.aws("s3", "sync", str(self.source), "s3://dt-data/cifar/")
        code, out, err = self.s3_sync("s3://dt-data/cifar", "--ip", IP)
        self.assertEqual(code, 0, err)
        data = self.shared / "data"
        self.assertEqual((data / "train" / "part-0").read_text(), "a,b\n1,2\n")
        self.assertEqual((data / "labels.txt").read_text(), "cat\ndog\n")
        marker = json.loads((self.shared / f"prepare_data_success_{IP}").read_text())
        self.assertEqual(marker["files"], 2)
        self.assertTrue(last_line(out).startswith("[s3_sync] ready: "), out)

    def test_a_missing_bucket_is_retried_then_fails_clearly(self):
        code, out, err = self.s3_sync("s3://no-such-bucket/x", "--ip", IP, "--attempts", "2")
        self.assertEqual(code, 1)
        self.assertIn("attempt 1 failed", out)
        self.assertRegex(last_line(err), r"^\[s3_sync\] error: aws s3 sync exited with \d+; "
                                         r"gave up after 2 attempts$")
        failed = json.loads((self.shared / f"prepare_data_failed_{IP}").read_text())
        self.assertIn("gave up", failed["output_tail"][-1])
        self.assertTrue(any("NoSuchBucket" in line for line in failed["output_tail"]),
                        failed["output_tail"])

    def test_an_empty_prefix_fails_and_under_the_agent_no_marker_is_written(self):
        self.aws("s3", "mb", "s3://dt-empty")
        code, _, err = self.s3_sync("s3://dt-empty/none", env={"DT_AGENT": "1"})
        self.assertEqual(code, 1)
        self.assertIn("holds 0 files after the sync", last_line(err))
        self.assertEqual([p.name for p in self.shared.iterdir()], ["data"], "no markers")

    def test_only_s3_uris(self):
        for bad in ["/etc", "--delete", "s3://-x", "s3://UPPER/x"]:
            code, _, err = self.s3_sync(bad, "--ip", IP)
            self.assertEqual(code, 2, bad)


if __name__ == "__main__":
    unittest.main()
