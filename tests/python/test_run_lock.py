"""scripts/env.sh's dt_run_alone: two runs that share a cargo target directory take turns (their
binaries are one path), the second says whose run it waits for, and a child the first left
running does not keep the second waiting."""
import os
import subprocess
import tempfile
import textwrap
import time
import unittest
from pathlib import Path

ENV_SH = Path(__file__).resolve().parents[2] / "scripts" / "env.sh"


class RunLockTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.tmp = Path(self.dir.name)
        self.log = self.tmp / "log"
        self.script = self.tmp / "run"
        # NAME SECONDS|go [leave-a-child]: notes its start and end in the log around a sleep,
        # or around a wait for the file `go` (the test says when).
        self.script.write_text(textwrap.dedent(f"""\
            #!/usr/bin/env bash
            set -euo pipefail
            source {ENV_SH}
            dt_run_alone "$0" "$@"
            echo "$1 start" >>{self.log}
            if [ "${{3:-}}" = leave-a-child ]; then sleep 30 >/dev/null 2>&1 & echo $! >{self.tmp}/child; fi
            if [ "$2" = go ]; then
                while [ ! -e {self.tmp}/go ]; do sleep 0.05; done
            else
                sleep "$2"
            fi
            echo "$1 end" >>{self.log}
            """))
        self.script.chmod(0o755)
        self.env = {**os.environ, "CARGO_TARGET_DIR": str(self.tmp / "target")}
        for key in ["DT_TARGET_HELD", "DT_TARGET_HOLDER"]:
            self.env.pop(key, None)

    def tearDown(self):
        child = self.tmp / "child"
        if child.exists():
            subprocess.run(["kill", child.read_text().strip()], check=False)
        self.dir.cleanup()

    def start(self, *args, stderr=subprocess.PIPE):
        return subprocess.Popen([str(self.script), *args], env=self.env, text=True,
                                stdout=subprocess.PIPE, stderr=stderr)

    def wait_for_line(self, line):
        for _ in range(100):
            if self.log.exists() and line in self.log.read_text().splitlines():
                return
            time.sleep(0.05)
        self.fail(f"{line!r} never logged")

    def test_two_runs_take_turns_and_the_second_says_whose_run_it_waits_for(self):
        first = self.start("first", "go")
        self.wait_for_line("first start")
        err_path = self.tmp / "second.err"
        with open(err_path, "w") as err_file:
            second = self.start("second", "0", stderr=err_file)
        # The first holds the lock until the second has said it waits, however slow its start.
        deadline = time.monotonic() + 60
        while "run: waiting" not in err_path.read_text():
            self.assertIsNone(second.poll(), err_path.read_text())
            self.assertLess(time.monotonic(), deadline, "the second run never said it waits")
            time.sleep(0.05)
        (self.tmp / "go").touch()
        second.communicate(timeout=30)
        first.communicate(timeout=30)
        err = err_path.read_text()
        self.assertEqual((first.returncode, second.returncode), (0, 0))
        self.assertEqual(self.log.read_text().splitlines(),
                         ["first start", "first end", "second start", "second end"])
        self.assertIn("run: waiting for another run that uses", err)
        self.assertIn(f"run in {ENV_SH.parents[1]}", err)

    def test_a_child_left_running_does_not_hold_the_lock(self):
        first = self.start("first", "0", "leave-a-child")
        first.communicate(timeout=30)
        second = self.start("second", "0")
        _, err = second.communicate(timeout=10)
        self.assertEqual(second.returncode, 0, err)
        self.assertNotIn("waiting", err)


if __name__ == "__main__":
    unittest.main()
