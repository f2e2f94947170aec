"""On every node the instance metadata answers root only (templates/user-data/node.sh): the job
runs as another user and must not use the instance's identity, neither the role's credentials
nor the signed identity document. The test runs node.sh's own block, as the stack renders it
with JobInstanceMetadata false and true, into a temporary /etc; then, in a network namespace of
its own holding 169.254.169.254 and fd00:ec2::254 with an HTTP server on both, loads the rules it
wrote the way dtd's unit does, and shows that root reaches the metadata and uid 65534 does not,
over IPv4 and IPv6; without the rules 65534 does reach it, so a missing or wrong rule fails.

It needs root (a network namespace, another uid, nftables), `ip` (iproute2), `nft` (nftables)
and `setpriv` (util-linux): scripts/setup --tests installs them. Where they are missing it fails,
saying so: CI runs as root, and a check that skipped itself there would prove nothing.

Run from the repository root: python3 -m unittest discover -s tests/python -v
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NODE = ROOT / "templates" / "user-data" / "node.sh"
ADDRESSES = ("169.254.169.254", "fd00:ec2::254")
OTHER_UID = 65534
# The block runs nothing that waits on the network: a few seconds is ample.
TIMEOUT = 20


def lock_block():
    """node.sh's `if [ '${JobInstanceMetadata}' != true ]; then ... fi`."""
    text = NODE.read_text()
    m = re.search(r"^if \[ '\$\{JobInstanceMetadata\}' != true \]; then\n.*?^fi\n", text,
                  re.M | re.S)
    assert m, "node.sh has no JobInstanceMetadata block"
    return m.group(0)


def run_block(etc, switch):
    """Runs the block as the stack renders it with JobInstanceMetadata=`switch`, its /etc paths
    under `etc`; dnf and retry are stand-ins that say when they would run."""
    body = lock_block().replace("${JobInstanceMetadata}", switch).replace("/etc/", f"{etc}/")
    stubs = "retry() { \"$@\"; }\ndnf() { echo \"dnf $*\"; return 1; }\n"
    return subprocess.run(["bash", "-euo", "pipefail", "-c", stubs + body],
                          capture_output=True, text=True, timeout=TIMEOUT)


def missing_tools():
    why = [] if os.geteuid() == 0 else ["root"]
    return why + [t for t in ("ip", "nft", "setpriv", "bash") if shutil.which(t) is None]


class Namespace:
    """A network namespace of the test's own, with the metadata's addresses on its loopback and
    an HTTP server answering on both."""

    def __init__(self, test):
        self.name = f"dt-imds-{os.getpid()}"
        ip = ["ip", "-n", self.name]
        test.run_ok(["ip", "netns", "add", self.name])
        test.addCleanup(subprocess.run, ["ip", "netns", "delete", self.name], timeout=TIMEOUT)
        test.run_ok(ip + ["link", "set", "lo", "up"])
        test.run_ok(ip + ["addr", "add", "169.254.169.254/32", "dev", "lo"])
        test.run_ok(ip + ["addr", "add", "fd00:ec2::254/128", "dev", "lo", "nodad"])
        docroot = Path(test.tmp) / "metadata"
        (docroot / "latest").mkdir(parents=True)
        # Bound to :: with IPv4 mapped: one server on both addresses.
        server = subprocess.Popen(
            self.exec([sys.executable, "-m", "http.server", "--bind", "::", "--directory",
                       str(docroot), "80"]),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        test.addCleanup(server.wait, TIMEOUT)
        test.addCleanup(server.kill)
        deadline = time.monotonic() + TIMEOUT
        while not all(self.get(a, 0).returncode == 0 for a in ADDRESSES):
            test.assertIsNone(server.poll(), "the metadata stand-in's server exited")
            test.assertLess(time.monotonic(), deadline, "the server never answered root")
            time.sleep(0.1)

    def exec(self, argv):
        return ["ip", "netns", "exec", self.name] + argv

    def get(self, address, uid):
        """An HTTP GET of the metadata's root as `uid`, with bash's /dev/tcp (so no interpreter
        the other uid may not be able to read)."""
        url = f"/dev/tcp/{address}/80"
        request = f"exec 3<>{url} && printf 'GET /latest/ HTTP/1.0\\r\\n\\r\\n' >&3 && head -1 <&3"
        ids = [f"--reuid={uid}", f"--regid={uid}", "--clear-groups"]
        return subprocess.run(self.exec(["setpriv", *ids, "bash", "-c", request]),
                              capture_output=True, text=True, timeout=TIMEOUT)


class MetadataLockTest(unittest.TestCase):
    def setUp(self):
        missing = missing_tools()
        if missing:
            self.fail(f"this test needs {', '.join(missing)}: run it as root after "
                      "scripts/setup --tests (which installs nftables)")
        self.tmp = tempfile.mkdtemp(prefix="dt-imds.")
        self.addCleanup(shutil.rmtree, self.tmp)

    def run_ok(self, argv):
        r = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT)
        self.assertEqual(r.returncode, 0, f"{argv}: {r.stderr}")
        return r

    def written(self, switch):
        etc = Path(self.tmp) / f"etc-{switch}"
        (etc / "dt").mkdir(parents=True)
        r = run_block(etc, switch)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        return etc

    def unit_command(self, etc):
        """The command dtd's drop-in runs before dtd (`+`: outside its sandbox)."""
        dropin = (etc / "systemd/system/dtd.service.d/imds.conf").read_text()
        m = re.fullmatch(r"\[Service\]\nExecStartPre=\+(.+)\n", dropin)
        self.assertIsNotNone(m, dropin)
        return m.group(1).split()

    def assert_reaches(self, ns, uid):
        for address in ADDRESSES:
            r = ns.get(address, uid)
            self.assertEqual((r.returncode, r.stdout.strip()), (0, "HTTP/1.0 200 OK"),
                             f"uid {uid} to {address}: {r.stderr}")

    def test_only_root_reaches_the_metadata_over_ipv4_and_ipv6(self):
        etc = self.written("false")
        command = self.unit_command(etc)
        self.assertEqual(command, ["nft", "-f", f"{etc}/dt/imds.nft"])
        ns = Namespace(self)
        # Without the rules every user reaches it: what follows is the rules' doing.
        self.assert_reaches(ns, OTHER_UID)

        self.run_ok(ns.exec(command))
        self.assert_reaches(ns, 0)
        for address in ADDRESSES:
            started = time.monotonic()
            r = ns.get(address, OTHER_UID)
            self.assertNotEqual(r.returncode, 0, f"uid {OTHER_UID} reached {address}")
            self.assertIn("Connection refused", r.stderr)
            # Refused, not dropped: a client is not left to its timeouts.
            self.assertLess(time.monotonic() - started, 5)

        # dtd's every start loads the file again: the table is replaced, not doubled.
        self.run_ok(ns.exec(command))
        listed = self.run_ok(ns.exec(["nft", "list", "table", "inet", "dt_imds"])).stdout
        self.assertEqual(listed.count("reject"), 2, listed)
        self.assert_reaches(ns, 0)

    def test_the_switch_leaves_the_metadata_open_and_writes_nothing(self):
        etc = self.written("true")
        self.assertEqual(sorted(p.name for p in etc.rglob("*")), ["dt"])


if __name__ == "__main__":
    unittest.main()
