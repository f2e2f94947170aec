"""Unit tests of prepare-data/dt_atomic.py, the atomic write that dtprepare.py, dt_torch.py and
examples/elastic_job.py share: the content whole or not at all, 0644 whatever the umask, the
temp file beside the target and gone afterwards, and the fsyncs a durable write makes (the file,
then its directory once renamed) and a quick one does not.

Run from the repository root: python3 -m unittest discover -s tests/python -v
"""
import os
import stat
import sys
import tempfile
import unittest
from pathlib import Path
from unittest import mock

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "prepare-data"))
import dt_atomic  # noqa: E402  (found only once prepare-data/ is on the path)


class AtomicWriteTest(unittest.TestCase):
    def setUp(self):
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.dir = Path(tmp.name)
        self.path = self.dir / "ack"

    def fsyncs(self, durable):
        """Writes b"7\\n" to the path and returns what each fsync saw: (a directory?, the path's
        content at that moment)."""
        seen = []
        real = os.fsync

        def fsync(fd):
            content = self.path.read_bytes() if self.path.exists() else None
            seen.append((stat.S_ISDIR(os.fstat(fd).st_mode), content))
            real(fd)

        with mock.patch("os.fsync", fsync):
            dt_atomic.atomic_write(str(self.path), b"7\n", durable=durable)
        return seen

    def test_the_content_replaces_the_old_whole_with_no_temp_file_left(self):
        self.path.write_bytes(b"old, and longer than the new\n")
        dt_atomic.atomic_write(str(self.path), b"7\n")
        self.assertEqual(self.path.read_bytes(), b"7\n")
        self.assertEqual(os.listdir(self.dir), ["ack"])

    def test_the_file_is_0644_whatever_the_umask(self):
        old = os.umask(0o077)
        try:
            dt_atomic.atomic_write(str(self.path), b"7\n")
        finally:
            os.umask(old)
        self.assertEqual(self.path.stat().st_mode & 0o777, 0o644)

    def test_the_temp_file_is_hidden_beside_the_target_and_renamed_over_it(self):
        renamed = []
        real = os.replace

        def replace(src, dst):
            renamed.append((src, dst))
            real(src, dst)

        with mock.patch("os.replace", replace):
            dt_atomic.atomic_write(str(self.path), b"7\n")
        [(src, dst)] = renamed
        self.assertEqual(dst, str(self.path))
        self.assertEqual(Path(src).parent, self.dir)
        self.assertTrue(Path(src).name.startswith(".ack."), src)

    def test_a_failed_write_keeps_the_old_file_and_leaves_no_temp_file(self):
        self.path.write_bytes(b"old\n")
        with self.assertRaises(TypeError):
            dt_atomic.atomic_write(str(self.path), "not bytes")
        self.assertEqual(self.path.read_bytes(), b"old\n")
        self.assertEqual(os.listdir(self.dir), ["ack"])

    def test_a_durable_write_fsyncs_the_file_then_the_directory_after_the_rename(self):
        self.assertEqual(self.fsyncs(durable=True), [(False, None), (True, b"7\n")])

    def test_a_quick_write_fsyncs_nothing(self):
        self.assertEqual(self.fsyncs(durable=False), [])
        self.assertEqual(self.path.read_bytes(), b"7\n")

    def test_a_relative_path_is_written_in_its_own_directory(self):
        cwd = os.getcwd()
        os.chdir(self.dir)
        try:
            dt_atomic.atomic_write("ack", b"7\n")
        finally:
            os.chdir(cwd)
        self.assertEqual(self.path.read_bytes(), b"7\n")


class UsersTest(unittest.TestCase):
    """The three users write through this one function rather than a copy of their own."""

    def test_dtprepare_writes_its_markers_with_it(self):
        import dtprepare
        self.assertIs(dtprepare.atomic_write, dt_atomic.atomic_write)

    def test_no_other_python_file_writes_through_mkstemp_and_a_rename_of_its_own(self):
        users = ["prepare-data/dtprepare.py", "templates/job/dt_torch.py", "examples/elastic_job.py"]
        for name in users:
            text = (ROOT / name).read_text()
            self.assertIn("from dt_atomic import atomic_write", text, name)
            self.assertNotIn("mkstemp", text, name)
            self.assertNotIn("def fsync_dir", text, name)


if __name__ == "__main__":
    unittest.main()
