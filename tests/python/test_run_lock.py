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
        # NAME SECONDS [leave-a-child]: notes its start and end in the log around a sleep.
        self.script.write_text(textwrap.dedent(f"""\
            #!/usr/bin/env bash
            set -euo pipefail
            source {ENV_SH}
            dt_run_alone "$0" "$@"
            echo "$1 start" >>{self.log}
            if [ "${{3:-}}" = leave-a-child ]; then sleep 30 >/dev/null 2>&1 & echo $! >{self.tmp}/child; fi
            sleep "$2"
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

    def start(self, *args):
        return subprocess.Popen([str(self.script), *args], env=self.env, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def wait_for_line(self, line):
        for _ in range(100):
            if self.log.exists() and line in self.log.read_text().splitlines():
                return
            time.sleep(0.05)
        self.fail(f"{line!r} never logged")

    def test_two_runs_take_turns_and_the_second_says_whose_run_it_waits_for(self):
        first = self.start("first", "1")
        self.wait_for_line("first start")
        second = self.start("second", "0")
        _, err = second.communicate(timeout=30)
        first.communicate(timeout=30)
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
