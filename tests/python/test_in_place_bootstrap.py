"""With TorchrunStrategy=in_place every node's bootstrap (templates/user-data/node.sh) installs
torchft beside torchrun and puts the master's IP into its config, where the stack wrote
`@MASTER_IP@` (job.launcher.in_place.lighthouse): the master's own, from the instance metadata
(master.sh's dt_master_ip), a worker's from the address dtd run published in the shared
directory, believed only when root's, since through the stack's access point a worker writes as
uid 50000.

The test runs node.sh's own functions and block with /etc/dt and /myEFSvolume moved to a
temporary directory, torchrun's directory holding a python3 that records what pip was asked for,
and `sleep` a no-op. It needs root (a file of another owner): CI runs as root, and a check that
skipped itself there would prove nothing.

Run from the repository root: python3 -m unittest discover -s tests/python -v
"""
import os
import re
import subprocess
import tempfile
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NODE = ROOT / "templates" / "user-data" / "node.sh"
MASTER = ROOT / "templates" / "user-data" / "master.sh"
PINS = ROOT / "requirements-torch.txt"
WORKER_UID = 50000
# What a node's PyTorch environment (the AMI's) already has, built together: the bootstrap adds
# torchft beside them and replaces neither.
ENVIRONMENTS_OWN = ("torch==", "numpy==")
CONFIG = ("job:\n  launcher: { torchrun: [/opt/pytorch/bin/torchrun], strategy: in_place, "
          "in_place: { lighthouse: '@MASTER_IP@:29510', collective_timeout: 10s } }\n")


def function(text, name):
    m = re.search(rf"^{name}\(\) \{{\n.*?^\}}\n", text, re.M | re.S)
    assert m, f"no {name}()"
    return m.group(0)


def in_place_block():
    """node.sh's `if grep -q @MASTER_IP@ ...; then ... fi`."""
    m = re.search(r"^if grep -q @MASTER_IP@ /etc/dt/dtd\.yaml\.new; then\n.*?^fi\n",
                  NODE.read_text(), re.M | re.S)
    assert m, "node.sh has no in_place block"
    return m.group(0)


class InPlaceBootstrapTest(unittest.TestCase):
    def setUp(self):
        self.assertEqual(os.geteuid(), 0, "needs root: a shared file of another owner")
        tmp = tempfile.TemporaryDirectory(prefix="dt-in-place-test.")
        self.addCleanup(tmp.cleanup)
        self.tmp = Path(tmp.name)
        for d in ("etc", "shared", "venv/bin"):
            (self.tmp / d).mkdir(parents=True)
        python = self.tmp / "venv" / "bin" / "python3"
        python.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" >{self.tmp}/pip-args\n')
        python.chmod(0o755)
        self.config = self.tmp / "etc" / "dtd.yaml.new"
        self.config.write_text(CONFIG)

    def run_block(self, role, address=None, owner=0, link=False, config=CONFIG):
        """The block as the stack renders it on `role`; dtd_address holds `address`."""
        self.config.write_text(config)
        if address is not None:
            target = self.tmp / "shared" / ("real_address" if link else "dtd_address")
            target.write_text(address)
            os.chown(target, owner, owner)
            if link:
                (self.tmp / "shared" / "dtd_address").symlink_to(target)
        node = NODE.read_text()
        script = "sleep() { :; }\n" + function(node, "retry") + function(node, "master_ip")
        if role == "master":
            # IMDSv2 as dt_master_ip asks it: a token by PUT, then the address with the token.
            script += ('curl() { case "$*" in *"-X PUT"*) echo tok ;; '
                       '*"X-aws-ec2-metadata-token: tok"*/meta-data/local-ipv4) echo 10.0.32.7 ;; '
                       '*) return 22 ;; esac; }\n')
            script += function(MASTER.read_text(), "dt_master_ip")
        script += in_place_block()
        script = (script.replace("${Torchrun}", str(self.tmp / "venv" / "bin" / "torchrun"))
                  .replace("${WorkerUid}", str(WORKER_UID))
                  .replace("/etc/dt/", f"{self.tmp}/etc/")
                  .replace("/myEFSvolume/", f"{self.tmp}/shared/"))
        return subprocess.run(["bash", "-euo", "pipefail", "-c", script], capture_output=True,
                              text=True, timeout=30)

    def pip_args(self):
        path = self.tmp / "pip-args"
        return path.read_text().split() if path.exists() else None

    def test_a_worker_takes_the_address_dtd_published(self):
        r = self.run_block("worker", "10.0.16.5:7719\n")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(self.config.read_text(), CONFIG.replace("@MASTER_IP@", "10.0.16.5"))

    def test_the_master_takes_its_own_from_the_instance_metadata(self):
        # A dtd_address of an earlier master is not this one's IP.
        r = self.run_block("master", "10.0.16.5:7719\n")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(self.config.read_text(), CONFIG.replace("@MASTER_IP@", "10.0.32.7"))

    def test_torchft_is_installed_as_requirements_torch_pins_it_but_torch(self):
        r = self.run_block("worker", "10.0.16.5:7719\n")
        self.assertEqual(r.returncode, 0, r.stderr)
        pins = [line.strip() for line in PINS.read_text().splitlines()
                if line.strip() and not line.startswith("#")]
        self.assertIn("torchft==0.2.0", pins)
        self.assertEqual(self.pip_args(),
                         ["-m", "pip", "install", "--no-input", "--progress-bar", "off"]
                         + [p for p in pins if not p.startswith(ENVIRONMENTS_OWN)])

    def test_an_address_a_worker_wrote_is_not_believed(self):
        for kind, kwargs in [("a worker's file", {"owner": WORKER_UID}),
                             ("a link to root's file", {"link": True})]:
            with self.subTest(kind):
                for p in (self.tmp / "shared").iterdir():
                    p.unlink()
                r = self.run_block("worker", "10.9.9.9:7719\n", **kwargs)
                self.assertNotEqual(r.returncode, 0)
                self.assertEqual(self.config.read_text(), CONFIG)
                self.assertIn("attempt 8 of master_ip failed", r.stderr)

    def test_no_address_yet_fails_the_boot(self):
        r = self.run_block("worker")
        self.assertNotEqual(r.returncode, 0)
        self.assertEqual(self.config.read_text(), CONFIG)

    def test_only_an_ip_reaches_the_config(self):
        for body in ("10.0.16.5/'x':7719\n", "master.internal:7719\n", "10.0.16.5\n10.1.1.1:7719\n"):
            with self.subTest(body):
                r = self.run_block("worker", body)
                self.assertNotEqual(r.returncode, 0)
                self.assertEqual(self.config.read_text(), CONFIG)

    def test_other_strategies_install_nothing(self):
        generation = ("job:\n  launcher: { torchrun: [/opt/pytorch/bin/torchrun], "
                      "strategy: generation }\n")
        r = self.run_block("worker", "10.0.16.5:7719\n", config=generation)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIsNone(self.pip_args())
        self.assertEqual(self.config.read_text(), generation)


if __name__ == "__main__":
    unittest.main()
