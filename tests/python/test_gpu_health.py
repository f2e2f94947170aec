"""Black-box tests of the default health check, templates/health/gpu_health.py.

There are no GPUs here: STAND-INS for nvidia-smi and dmesg (tests/standins/bin) come first on
PATH and answer from a node described in a JSON file ($DT_STANDIN_NODE): how many GPUs the driver
sees, their ECC counts and temperatures, a stand-in kernel log, or a hang. Every test asserts what
dtd agent reads: the exit code (0 healthy, 1 unhealthy, 3 GPUs gone) and the last line (the reason).

Run from the repository root: python3 -m unittest discover -s tests/python -v
"""
import json
import os
import subprocess
import sys
import tempfile
import time
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHECK = ROOT / "templates" / "health" / "gpu_health.py"
STANDINS = ROOT / "tests" / "standins" / "bin"
XID_79 = ("[ 8123.456789] NVRM: Xid (PCI:0000:10:1c): 79, pid=1234, name=python3, "
          "GPU has fallen off the bus.")


class GpuHealthTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.node = Path(self.tmp.name) / "node.json"
        self.set_node()

    def tearDown(self):
        self.tmp.cleanup()

    def set_node(self, **node):
        self.node.write_text(json.dumps(node))

    def check(self, *args, instance_type="p4d.24xlarge"):
        env = dict(os.environ, PATH=f"{STANDINS}:{os.environ['PATH']}",
                   DT_STANDIN_NODE=str(self.node), DT_INSTANCE_TYPE=instance_type)
        r = subprocess.run([str(CHECK), *args], env=env, capture_output=True, text=True, timeout=60)
        lines = [l for l in r.stdout.splitlines() if l.strip()]
        self.assertTrue(lines, f"no output; stderr: {r.stderr}")
        return r.returncode, lines[-1], r.stdout

    def test_a_healthy_node_passes_every_check(self):
        code, reason, out = self.check()
        self.assertEqual(code, 0, out)
        self.assertEqual(reason, "ok: the GPUs passed every check")
        self.assertIn("gpu count: 8 of 8 (p4d.24xlarge)", out)
        self.assertIn("xid: none in the kernel log since boot", out)
        self.assertIn("temperature: 8 GPU(s) below their slowdown temperature", out)

    def test_seven_of_eight_gpus_is_gpus_lost(self):
        self.set_node(gpus=7)
        code, reason, _ = self.check()
        self.assertEqual(code, 3)
        self.assertEqual(reason, "7 of 8 GPUs visible (p4d.24xlarge has 8)")

    def test_gpus_override_and_unknown_types(self):
        self.set_node(gpus=4)
        self.assertEqual(self.check("--gpus", "4")[0], 0)
        code, _, out = self.check(instance_type="m7i.large")
        self.assertEqual(code, 0)
        self.assertIn("gpu count: skipped, instance type m7i.large is not in the table", out)
        self.assertEqual(self.check(instance_type="g5.48xlarge")[0], 3)
        self.assertEqual(self.check(instance_type="g5.12xlarge")[0], 0)

    def test_a_driver_that_cannot_reach_a_gpu_is_gpus_lost(self):
        self.set_node(error="Unable to determine the device handle for GPU0000:10:1C.0: GPU is lost.  "
                            "Reboot the system to recover this GPU")
        code, reason, _ = self.check()
        self.assertEqual(code, 3)
        self.assertTrue(reason.startswith("GPUs unreachable: nvidia-smi failed (exit 9): Unable to"), reason)

    def test_xid_79_in_the_kernel_log_is_named_and_is_gpus_lost(self):
        self.set_node(kernel_log=["[    1.0] Linux version 6.1.0", XID_79])
        code, reason, _ = self.check()
        self.assertEqual(code, 3)
        self.assertEqual(reason, "Xid 79 (GPU has fallen off the bus) on PCI:0000:10:1c")

    def test_other_xids_are_unhealthy_and_can_be_ignored(self):
        self.set_node(kernel_log=["[ 9.0] NVRM: Xid (PCI:0000:11:1c): 13, pid=99, Graphics Exception"])
        code, reason, _ = self.check()
        self.assertEqual((code, reason), (1, "Xid 13 (graphics engine exception) on PCI:0000:11:1c"))
        self.assertEqual(self.check("--ignore-xid", "13,31")[0], 0)

    def test_a_kernel_log_file_instead_of_dmesg(self):
        log = Path(self.tmp.name) / "kern.log"
        log.write_text(XID_79 + "\n")
        code, reason, _ = self.check("--kernel-log", str(log))
        self.assertEqual(code, 3)
        self.assertIn("Xid 79", reason)
        code, reason, _ = self.check("--kernel-log", str(log) + ".missing")
        self.assertEqual(code, 1)
        self.assertIn("cannot read the kernel log", reason)

    def test_an_uncorrectable_ecc_error_is_unhealthy(self):
        self.set_node(ecc={"5": 2})
        code, reason, _ = self.check()
        self.assertEqual((code, reason), (1, "GPU 5: 2 uncorrectable ECC error(s)"))

    def test_a_gpu_at_its_slowdown_temperature_is_unhealthy(self):
        self.set_node(temp={"2": 89})
        code, reason, _ = self.check()
        self.assertEqual(code, 1)
        self.assertEqual(reason, "GPU 00000000:12:1C.0 at 89 C, at or over its slowdown temperature 89 C")
        self.set_node(temp={"2": 88})
        self.assertEqual(self.check()[0], 0)

    def test_each_check_can_be_turned_off(self):
        cases = [
            ("--no-gpu-count", dict(gpus=7)),
            ("--no-ecc", dict(ecc={"0": 1})),
            ("--no-xid", dict(kernel_log=[XID_79])),
            ("--no-temperature", dict(temp={"0": 100})),
        ]
        for flag, node in cases:
            with self.subTest(flag):
                self.set_node(**node)
                self.assertNotEqual(self.check()[0], 0)
                code, reason, out = self.check(flag)
                self.assertEqual(code, 0, out)
                self.assertEqual(reason, "ok: the GPUs passed every check")

    def test_a_hanging_nvidia_smi_fails_the_check_at_its_call_timeout(self):
        self.set_node(hang=True)
        started = time.monotonic()
        code, reason, _ = self.check("--call-timeout", "1", "--no-xid")
        self.assertLess(time.monotonic() - started, 10)
        self.assertEqual(code, 1)
        self.assertIn("nvidia-smi did not answer within 1s", reason)
        pids = [int(line.split()[0]) for line in Path(f"{self.node}.pids").read_text().splitlines()]
        self.assertTrue(pids)
        for pid in pids:
            self.assertTrue(gone(pid), f"the stand-in nvidia-smi {pid} is still running")

    def test_no_nvidia_smi_is_unhealthy_not_gpus_lost(self):
        env = dict(os.environ, PATH=self.tmp.name, DT_STANDIN_NODE=str(self.node))
        r = subprocess.run([sys.executable, str(CHECK), "--no-xid"], env=env,
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("cannot run nvidia-smi", r.stdout.splitlines()[-1])

def gone(pid):
    """Gone, or a zombie waiting for a reaper (the container's init may not reap)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state == "Z"


if __name__ == "__main__":
    unittest.main()
