"""The systemd units the node bootstrap writes pass `systemd-analyze verify`.

templates/user-data/node.sh installs dtd.service from the release (templates/systemd/, its
@ROLE@ and @REGION@ filled in by sed) with a drop-in that loads the instance metadata's rules
first (ExecStartPre=), and on the master templates/user-data/master.sh adds a drop-in
(OnFailure=) and dt-replace-master.service with its script. The test renders them the
way the bootstrap does: the unit with its placeholders filled in, and every `cat >PATH <<'MARK'`
here-document and `printf '...' >PATH` of the two scripts becomes PATH under a temporary root,
with the stack's variables replaced by plain values. `dtd` itself comes from the release archive,
and nft from Amazon Linux, so stubs stand in at /usr/local/bin/dtd and /usr/sbin/nft (verify
checks that ExecStart= and ExecStartPre= are executable).

`systemd-analyze verify` works here without systemd as PID 1: it loads the units itself. With
--root it reads units only under that root, so the host's /usr/lib/systemd/system (the targets
the units order themselves after) is copied in. verify exits 0 on settings it ignores (an
unknown key, a value it cannot parse), so any output fails the test too.

Run from the repository root: python3 -m unittest discover -s tests/python -v
"""
import os
import re
import shutil
import subprocess
import tempfile
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
USER_DATA = ROOT / "templates" / "user-data"
UNIT = ROOT / "templates" / "systemd" / "dtd.service"
UNIT_PATH = "/etc/systemd/system/dtd.service"
# The line of node.sh that installs the unit, as the stack's variables leave it.
INSTALL_UNIT = ("sed -e 's/@ROLE@/${DtdRole}/' -e 's/@REGION@/${AWS::Region}/' "
                "\"$workdir/dtd.service\" \\\n    >/etc/systemd/system/dtd.service")
ANALYZE = shutil.which("systemd-analyze")
HOST_UNITS = Path("/usr/lib/systemd/system")

HEREDOC = re.compile(r"^\s*cat >(?P<path>/\S+) <<'(?P<mark>\w+)'\n(?P<body>.*?)^(?P=mark)\n",
                     re.M | re.S)
PRINTF = re.compile(r"^\s*printf '(?P<body>[^']*)'(?: \\\n\s*)? *>(?P<path>/\S+)\n", re.M)


def render(text, role):
    values = {"${DtdRole}": role, "${AWS::Region}": "us-east-1", "${AWS::StackName}": "demo"}
    for name, value in values.items():
        text = text.replace(name, value)
    return text


def written_files(script, role):
    """{path: content} of the units and programs a bootstrap script writes with cat here-documents
    or printf (not dtd's configuration: tests/integration/stack/ checks that one)."""
    text = (USER_DATA / script).read_text()
    files = {m["path"]: render(m["body"], role) for m in HEREDOC.finditer(text)}
    for m in PRINTF.finditer(text):
        files[m["path"]] = m["body"].replace("\\n", "\n")
    if INSTALL_UNIT in text:
        unit = UNIT.read_text().replace("@ROLE@", "${DtdRole}").replace("@REGION@", "${AWS::Region}")
        files[UNIT_PATH] = render(unit, role)
    return {p: c for p, c in files.items() if p.startswith(("/etc/systemd/", "/usr/local/"))}


def node_root(tmp, role):
    """A root with the unit files (and their programs) a node of this role ends up with."""
    root = Path(tmp) / role
    files = written_files("node.sh", role)
    if role == "run":
        files.update(written_files("master.sh", role))
    for path, content in files.items():
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)
        if content.startswith("#!"):
            target.chmod(0o755)
    # Stand-ins for what ExecStart= and ExecStartPre= run (verify checks they are executable):
    # the release's dtd, and Amazon Linux's nft (nftables), which the bare name finds.
    for program in ("usr/local/bin/dtd", "usr/sbin/nft"):
        stand_in = root / program
        stand_in.parent.mkdir(parents=True, exist_ok=True)
        stand_in.write_text(f"#!/bin/sh\n# stand-in for /{program}\n")
        stand_in.chmod(0o755)
    shutil.copytree(HOST_UNITS, root / "usr/lib/systemd/system", symlinks=True)
    return root, files


def verify(root, *units):
    return subprocess.run([ANALYZE, "verify", f"--root={root}", *units], capture_output=True,
                          text=True, timeout=60, env={**os.environ, "SYSTEMD_LOG_COLOR": "0"})


@unittest.skipUnless(ANALYZE and HOST_UNITS.is_dir(),
                     "needs systemd-analyze and the host's /usr/lib/systemd/system")
class UnitFilesTest(unittest.TestCase):
    def test_the_bootstrap_writes_the_units(self):
        worker = written_files("node.sh", "agent")
        self.assertEqual(
            sorted(worker),
            ["/etc/systemd/system/dtd.service", "/etc/systemd/system/dtd.service.d/imds.conf"])
        master = written_files("master.sh", "run")
        self.assertEqual(
            sorted(master),
            ["/etc/systemd/system/dt-replace-master.service",
             "/etc/systemd/system/dtd.service.d/replace-master.conf",
             "/usr/local/sbin/dt-replace-master"])
        for files in (worker, master):
            for path, content in files.items():
                self.assertNotIn("${", content, path)

    def test_worker_unit_verifies(self):
        with tempfile.TemporaryDirectory(prefix="dt-units.") as tmp:
            root, files = node_root(tmp, "agent")
            self.assertIn("ExecStart=/usr/local/bin/dtd agent --config /etc/dt/dtd.yaml",
                          files["/etc/systemd/system/dtd.service"])
            r = verify(root, "dtd.service")
            self.assertEqual((r.returncode, r.stdout + r.stderr), (0, ""))
            # The drop-in is loaded: dtd starts only after the instance metadata's rules, which
            # '+' loads outside dtd's sandbox (it has no CAP_NET_ADMIN).
            show = subprocess.run([ANALYZE, "cat-config", f"--root={root}",
                                   "systemd/system/dtd.service.d/imds.conf"],
                                  capture_output=True, text=True, timeout=60)
            self.assertIn("ExecStartPre=+nft -f /etc/dt/imds.nft", show.stdout, show.stderr)

    def test_master_units_verify(self):
        with tempfile.TemporaryDirectory(prefix="dt-units.") as tmp:
            root, _ = node_root(tmp, "run")
            r = verify(root, "dtd.service", "dt-replace-master.service")
            self.assertEqual((r.returncode, r.stdout + r.stderr), (0, ""))
            # The drop-in is loaded: dtd.service's OnFailure= names the replacement unit.
            show = subprocess.run([ANALYZE, "cat-config", f"--root={root}",
                                   "systemd/system/dtd.service.d/replace-master.conf"],
                                  capture_output=True, text=True, timeout=60)
            self.assertIn("OnFailure=dt-replace-master.service", show.stdout, show.stderr)

    def test_verify_reports_a_bad_setting(self):
        # Not vacuous: a misspelt sandbox key and a bad Restart= value are reported.
        with tempfile.TemporaryDirectory(prefix="dt-units.") as tmp:
            root, _ = node_root(tmp, "agent")
            unit = root / "etc/systemd/system/dtd.service"
            unit.write_text(unit.read_text().replace("ProtectSystem=", "ProtectSystm=")
                            .replace("Restart=on-failure", "Restart=sometimes"))
            r = verify(root, "dtd.service")
            self.assertIn("Unknown key 'ProtectSystm'", r.stderr)
            self.assertIn("restart specifier", r.stderr)


if __name__ == "__main__":
    unittest.main()
