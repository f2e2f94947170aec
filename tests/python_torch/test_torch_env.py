"""The project's PyTorch environment (requirements-torch.txt) has what torch and scripts written
for torchft load besides torch itself: NumPy, which torch must find at import (without it torch
warns "Failed to initialize NumPy" and cannot convert arrays). Runs with PyTorch's virtualenv
(scripts/test)."""
import subprocess
import sys
import unittest


class TorchEnvironmentTest(unittest.TestCase):
    def test_torch_finds_numpy(self):
        # A fresh interpreter with warnings as errors: torch's NumPy warning fails the import.
        code = "import numpy, torch; print(torch.from_numpy(numpy.arange(4.0)).sum().item())"
        run = subprocess.run([sys.executable, "-W", "error::UserWarning", "-c", code],
                             capture_output=True, text=True, timeout=120)
        self.assertEqual(run.returncode, 0, run.stderr)
        self.assertEqual(run.stdout.strip(), "6.0")


if __name__ == "__main__":
    unittest.main()
