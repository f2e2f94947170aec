"""The master's bootstrap keeps the prepare-data program's directory root's without adopting
what a worker put there first (templates/user-data/master.sh, dt_after_mount).

dtd agent runs that program as root on every worker, and only if its directory is root's and
written by no one else; a worker could make the directory before the master boots (a file system
kept from an earlier stack). chown -R would make what it put there root's, so the bootstrap moves
such a directory aside instead. The test runs the function itself with bash, the shared
directory being a temporary one (its path replaced in the function's text) and the worker
uid 65534; it needs root to own files as another user (unittest reports the skip).

Run from the repository root: python3 -m unittest discover -s tests/python -v
"""
import os
import re
import subprocess
import tempfile
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MASTER = ROOT / "templates" / "user-data" / "master.sh"
WORKER = 65534


def after_mount(shared, script, training_script=""):
    """The text of dt_after_mount with the stack's values and the shared directory's path."""
    text = MASTER.read_text()
    body = "".join(
        re.search(rf"^{name}\(\) \{{\n.*?^\}}\n", text, re.M | re.S).group(0)
        for name in ("dt_job_files", "dt_after_mount")
    ).replace("/myEFSvolume", str(shared))
    body = body.replace("${WorkerGid}", "50000").replace("${WorkerUid}", "50000")
    body = body.replace("${PrepareDataScriptPath}", str(script))
    return body.replace("${TrainingScript}", training_script)


@unittest.skipUnless(os.geteuid() == 0, "needs root: files owned by another user")
class AfterMountTest(unittest.TestCase):
    def run_after_mount(self, shared, script, training_script=""):
        # The job's user makes its own files in job/run: it must reach it, as it reaches
        # /myEFSvolume on a node (mode 1775).
        os.chmod(shared.parent, 0o755)
        r = subprocess.run(["bash", "-euo", "pipefail", "-c",
                            after_mount(shared, script, training_script) + "dt_after_mount\n"],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr)
        return r.stdout

    def test_a_directory_a_worker_made_first_is_moved_aside_not_adopted(self):
        with tempfile.TemporaryDirectory() as tmp:
            shared = Path(tmp) / "efs"
            shared.mkdir()
            home = shared / "prepare"
            home.mkdir()
            for name in ("prepare-data.py", "dtprepare.py"):
                (home / name).write_text("#!/bin/sh\necho planted\n")
                os.chown(home / name, WORKER, WORKER)
            os.chown(home, WORKER, WORKER)
            out = self.run_after_mount(shared, home / "prepare-data.py")
            self.assertIn(f"{home} is not root's: moved to {home}.untrusted-", out)
            st = home.stat()
            self.assertEqual((st.st_uid, st.st_mode & 0o7777), (0, 0o755))
            self.assertEqual(list(home.iterdir()), [])
            [aside] = [p for p in shared.iterdir() if p.name.startswith("prepare.untrusted-")]
            for name in ("prepare-data.py", "dtprepare.py"):
                self.assertEqual((aside / name).stat().st_uid, WORKER, name)
            st = shared.stat()
            self.assertEqual((st.st_uid, st.st_gid, st.st_mode & 0o7777), (0, 50000, 0o1775))

    def test_roots_directory_is_kept_and_a_workers_program_in_it_moved_aside(self):
        with tempfile.TemporaryDirectory() as tmp:
            shared = Path(tmp) / "efs"
            shared.mkdir()
            home = shared / "prepare"
            home.mkdir(mode=0o775)
            os.chmod(home, 0o775)
            (home / "dtprepare.py").write_text("# the user's\n")
            script = home / "prepare-data.py"
            script.write_text("#!/bin/sh\necho planted\n")
            os.chown(script, WORKER, WORKER)
            self.run_after_mount(shared, script)
            self.assertEqual(home.stat().st_mode & 0o7777, 0o755)
            self.assertEqual((home / "dtprepare.py").read_text(), "# the user's\n")
            self.assertFalse(script.exists())
            self.assertEqual((home / "prepare-data.py.untrusted").stat().st_uid, WORKER)

    def test_the_jobs_files_are_roots_in_a_directory_workers_cannot_write(self):
        with tempfile.TemporaryDirectory() as tmp:
            shared = Path(tmp) / "efs"
            shared.mkdir()
            job = shared / "job"
            job.mkdir()
            # A worker got there first, with an ack of its own.
            (job / "run").mkdir()
            (job / "run" / "ack").write_text("18446744073709551615\n")
            for p in (job / "run" / "ack", job / "run", job):
                os.chown(p, WORKER, WORKER)
            self.run_after_mount(shared, shared / "prepare" / "prepare-data.py")
            for d in (job, job / "run"):
                st = d.stat()
                self.assertEqual((st.st_uid, st.st_mode & 0o7777), (0, 0o755), d)
            for name in ("ack", "host_worker_log", "job.pid", "progress"):
                st = (job / "run" / name).stat()
                self.assertEqual((st.st_uid, st.st_mode & 0o7777), (0, 0o644), name)
            self.assertEqual((job / "run" / "ack").read_text(), "0\n")
            [aside] = [p for p in shared.iterdir() if p.name.startswith("job.untrusted-")]
            self.assertEqual((aside / "run" / "ack").stat().st_uid, WORKER)
            # The job's own content survives a reboot of the master.
            (job / "run" / "ack").write_text("7\n")
            self.run_after_mount(shared, shared / "prepare" / "prepare-data.py")
            self.assertEqual((job / "run" / "ack").read_text(), "7\n")

    def test_with_a_training_script_its_directory_stays_roots_and_the_job_writes_only_run(self):
        # torchrun runs as the workers' access point uid (dt-job, 50000): it writes the ack and
        # progress in job/run, by rename, and can neither change nor add a file beside the
        # training script (Python puts the script's directory first on its path).
        with tempfile.TemporaryDirectory() as tmp:
            shared = Path(tmp) / "efs"
            shared.mkdir()
            self.run_after_mount(shared, shared / "prepare" / "prepare-data.py",
                                 "/myEFSvolume/job/train.py,--epochs,90")
            st = (shared / "job").stat()
            self.assertEqual((st.st_uid, st.st_gid, st.st_mode & 0o7777), (0, 0, 0o755))
            st = (shared / "job" / "run").stat()
            self.assertEqual((st.st_uid, st.st_gid, st.st_mode & 0o7777), (50000, 50000, 0o755))
            for name in ("ack", "host_worker_log", "job.pid", "progress"):
                st = (shared / "job" / "run" / name).stat()
                self.assertEqual((st.st_uid, st.st_mode & 0o7777), (50000, 0o644), name)
            self.assertEqual((shared / "job" / "run" / "ack").read_text(), "0\n")

    def test_root_follows_no_link_the_jobs_user_put_in_its_directory(self):
        # job/run is the job user's: a link it puts at `ack` or `progress` must not make the
        # master's root write, truncate or create a file of root's elsewhere.
        with tempfile.TemporaryDirectory() as tmp:
            shared = Path(tmp) / "efs"
            run = shared / "job" / "run"
            run.mkdir(parents=True)
            os.chmod(shared / "job", 0o755)
            os.chown(run, 50000, 50000)
            victim = Path(tmp) / "roots-file"
            victim.write_text("")
            os.chmod(victim, 0o644)
            os.symlink(victim, run / "ack")
            os.lchown(run / "ack", 50000, 50000)
            absent = Path(tmp) / "roots-dir" / "created"
            absent.parent.mkdir()
            os.symlink(absent, run / "progress")
            os.lchown(run / "progress", 50000, 50000)
            self.run_after_mount(shared, shared / "prepare" / "prepare-data.py",
                                 "/myEFSvolume/job/train.py")
            self.assertEqual(victim.read_text(), "", "root wrote through the job's link")
            self.assertFalse(absent.exists(), "root created a file through the job's link")
            for name in ("host_worker_log", "job.pid"):
                st = (run / name).stat()
                self.assertEqual((st.st_uid, st.st_mode & 0o7777), (50000, 0o644), name)

    def test_a_state_directory_others_made_or_can_enter_is_moved_aside(self):
        for owner, mode in ((WORKER, 0o700), (0, 0o755)):
            with tempfile.TemporaryDirectory() as tmp:
                shared = Path(tmp) / "efs"
                (shared / ".dt" / "itest").mkdir(parents=True)
                (shared / ".dt" / "itest" / "state.json").write_text("{}")
                os.chown(shared / ".dt", owner, owner)
                os.chmod(shared / ".dt", mode)
                out = self.run_after_mount(shared, shared / "prepare" / "prepare-data.py")
                self.assertIn(".dt is not root's 0700: moved aside", out)
                st = (shared / ".dt").stat()
                self.assertEqual((st.st_uid, st.st_mode & 0o7777), (0, 0o700))
                self.assertEqual(list((shared / ".dt").iterdir()), [])
                [aside] = [p for p in shared.iterdir() if p.name.startswith(".dt.untrusted-")]
                self.assertTrue((aside / "itest" / "state.json").exists())
        # Root's and 0700: kept as it is.
        with tempfile.TemporaryDirectory() as tmp:
            shared = Path(tmp) / "efs"
            (shared / ".dt" / "itest").mkdir(parents=True)
            os.chmod(shared / ".dt", 0o700)
            self.run_after_mount(shared, shared / "prepare" / "prepare-data.py")
            self.assertTrue((shared / ".dt" / "itest").is_dir())


if __name__ == "__main__":
    unittest.main()
