"""scripts/gpu-check on this machine, which has no GPU: its answer here (exit 3, and why), its
refusal of bad arguments, and a rehearsal of every step it takes on a GPU machine, with the
tests' stand-in nvidia-smi and the example job on the CPU (gloo). Runs with PyTorch's virtualenv
(scripts/test)."""
import os
import re
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHECK = ROOT / "scripts" / "gpu-check"
STANDINS = ROOT / "tests" / "standins" / "bin"


def run(*args, env=None, timeout=600):
    return subprocess.run([sys.executable, str(CHECK), *args], env=env or dict(os.environ),
                          capture_output=True, text=True, timeout=timeout)


def load_check():
    import importlib.machinery
    import importlib.util
    loader = importlib.machinery.SourceFileLoader("gpu_check", str(CHECK))
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader("gpu_check", loader))
    loader.exec_module(module)
    return module


class GpuCheckTest(unittest.TestCase):
    def test_the_steps_are_read_from_ranks_lines_that_ran_into_each_other(self):
        # Seen in a clone's run: two ranks' lines on one line of the shared log.
        check = load_check()
        log = ("[torch_job] generation 2: rank 1 of 2, from step 935[torch_job] generation 2: "
               "rank 0 of 2, from step 935\n")
        self.assertEqual(check._from_step(log), 935)
        self.assertEqual(check._stopped_at("[torch_job] rank 0: stopping at step 12[torch_job] x"), 12)
        self.assertIsNone(check._from_step("no step here\n"))

    def test_without_a_driver_it_says_there_is_no_gpu_and_exits_3(self):
        with tempfile.TemporaryDirectory() as empty:
            # Only python on PATH: no nvidia-smi, whatever this machine has.
            os.symlink(sys.executable, os.path.join(empty, "python3"))
            out = run(env=dict(os.environ, PATH=empty))
        self.assertEqual(out.returncode, 3, out.stdout + out.stderr)
        self.assertIn("gpu-check: no GPU here: nvidia-smi is not on PATH", out.stdout)
        self.assertIn("Nothing was checked", out.stdout)

    def test_a_driver_without_cuda_in_pytorch_is_no_gpu_either(self):
        with tempfile.TemporaryDirectory() as d:
            node = Path(d) / "node.json"
            node.write_text('{"gpus": 1}')
            env = dict(os.environ, PATH=f"{STANDINS}:{os.environ['PATH']}",
                       DT_STANDIN_NODE=str(node))
            out = run(env=env)
        self.assertEqual(out.returncode, 3, out.stdout + out.stderr)
        self.assertRegex(out.stdout, r"no GPU here: PyTorch \S+ sees no CUDA device")

    def test_bad_arguments_exit_2(self):
        out = run("--steps-for", "0")
        self.assertEqual(out.returncode, 2)
        self.assertIn("--steps-for must be above 0", out.stderr)

    def test_a_rehearsal_takes_every_step_and_prints_the_figures(self):
        out = run("--rehearse", "--steps-for", "2")
        text = out.stdout
        self.assertEqual(out.returncode, 0, text + out.stderr)
        self.assertEqual(len(re.findall(r"^GPU +\d: .*stand-in.*, 81920 MiB$", text, re.M)), 2, text)
        self.assertIn("PASS   health check (ECC, Xid, temperature, 2 GPU(s)): exit 0", text)
        self.assertIn("PASS   health check expecting 3 GPUs: exit 3 (GPUs gone)", text)
        self.assertRegex(text, r"FIGURE step time on 2 cpu process\(es\): [0-9.]+ ms")
        m = re.search(r"FIGURE generation change: pause ([0-9.]+) s .*steps lost (\d+) "
                      r"\(stopped with a checkpoint at step (\d+), resumed from (\d+)\)", text)
        self.assertIsNotNone(m, text)
        self.assertEqual(m[2], "0", text)
        self.assertEqual(m[3], m[4], text)
        self.assertEqual(len(re.findall(r"^SKIP ", text, re.M)), 2, text)
        self.assertTrue(text.endswith("gpu-check: every check passed\n"), text)


if __name__ == "__main__":
    unittest.main()
