"""The CloudFormation stack is written from templates/stack.yaml and embeds templates/ (it
cannot read files); scripts/sync-stack writes it. These tests keep the two in sync and check that the script notices drift.

Run from the repository root: python3 -m unittest discover -s tests/python -v
"""
import re
import shutil
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SYNC = ROOT / "scripts" / "sync-stack"


def sync(*args):
    r = subprocess.run([sys.executable, str(SYNC), *map(str, args)], capture_output=True,
                       text=True, timeout=30)
    return r.returncode, r.stdout, r.stderr


def block_body(text):
    """The block scalar that starts `text`: its lines up to the first one indented less (blank
    lines inside it included)."""
    lines = text.split("\n")
    indent = len(lines[0]) - len(lines[0].lstrip(" "))
    body = []
    for line in lines:
        if line.strip() and len(line) - len(line.lstrip(" ")) < indent:
            break
        body.append(line)
    return "\n".join(body)


class StackSyncTest(unittest.TestCase):
    def test_the_stack_holds_the_current_templates(self):
        code, _, err = sync("--check")
        self.assertEqual(code, 0, err)

    def test_every_embedded_template_is_a_file(self):
        stack = (ROOT / "cloudformation" / "dynamic-training.yaml").read_text()
        embedded = [name for line in stack.splitlines() if "|  # from templates/" in line
                    for name in line.split("# from ")[1].strip().split(" + ")]
        self.assertEqual(embedded.count("templates/user-data/node.sh"), 2, "master, worker")
        self.assertEqual(embedded.count("templates/user-data/master.sh"), 1)
        self.assertIn("templates/dtd.yaml", embedded)
        self.assertEqual(embedded.count("templates/dtd.yaml"), 2, "master, worker")
        for name in embedded:
            self.assertTrue((ROOT / name).is_file(), name)

    def test_the_stack_fits_in_s3_and_is_deployed_through_it(self):
        # "Template body size in an Amazon S3 object": 1 MB (AWS CloudFormation User Guide,
        # "CloudFormation quotas"), 1,000,000 bytes as cfn-lint's E1002 counts it. A template
        # in the request itself may have 51,200 ("Template body size in a request"): past that
        # the documented deploy must upload it (docs/deploy.md, --s3-bucket).
        size = (ROOT / "cloudformation" / "dynamic-training.yaml").stat().st_size
        self.assertLessEqual(size, 1_000_000, f"the stack is {size} bytes")
        deploy = re.search(r"^aws cloudformation deploy .*?[^\\]\n",
                           (ROOT / "docs" / "deploy.md").read_text(), re.M | re.S)
        self.assertIsNotNone(deploy, "docs/deploy.md has no deploy command")
        command = deploy.group(0)
        self.assertIn("--template-file cloudformation/dynamic-training.yaml", command)
        if size > 51200:
            self.assertIn("--s3-bucket <bucket>", command)

    def test_concatenated_scripts_keep_the_first_shebang(self):
        stack = (ROOT / "cloudformation" / "dynamic-training.yaml").read_text()
        master = stack.split("# from templates/user-data/master.sh + templates/user-data/node.sh\n")
        self.assertEqual(len(master), 2)
        body = block_body(master[1])
        sources = [(ROOT / "templates" / "user-data" / n).read_text() for n in ("master.sh", "node.sh")]
        # node.sh's shebang is dropped; master.sh's own and its dt-replace-master script's stay.
        self.assertEqual(body.count("#!/bin/bash"), sum(t.count("#!/bin/bash") for t in sources) - 1)
        self.assertTrue(body.lstrip().startswith("#!/bin/bash\n"))
        self.assertIn("hook before_start", body)  # node.sh's
        self.assertIn("dt_before_start()", body)  # master.sh's

    def test_drift_is_reported_and_fixed(self):
        with tempfile.TemporaryDirectory(prefix="dt-sync-test.") as tmp:
            root = Path(tmp)
            shutil.copytree(ROOT / "cloudformation", root / "cloudformation")
            shutil.copytree(ROOT / "templates", root / "templates")
            config = root / "templates" / "dtd.yaml"
            config.write_text(config.read_text().replace("interval: 2s", "interval: 3s"))

            code, _, err = sync("--check", "--root", root)
            self.assertEqual(code, 1)
            self.assertIn("out of sync with templates/: cloudformation/dynamic-training.yaml", err)

            code, out, _ = sync("--root", root)
            self.assertEqual(code, 0)
            self.assertIn("updated cloudformation/dynamic-training.yaml", out)
            stack = (root / "cloudformation" / "dynamic-training.yaml").read_text()
            self.assertEqual(stack.count("interval: 3s"), 2)
            self.assertNotIn("interval: 2s", stack)
            # Only the embedded blocks changed.
            original = (ROOT / "cloudformation" / "dynamic-training.yaml").read_text()
            self.assertEqual(stack.replace("interval: 3s", "interval: 2s"), original)
            self.assertEqual(sync("--check", "--root", root)[0], 0)

    def test_the_stack_is_written_from_its_source_without_its_comments(self):
        source = (ROOT / "templates" / "stack.yaml").read_text()
        stack = (ROOT / "cloudformation" / "dynamic-training.yaml").read_text()
        comments = [l for l in source.splitlines() if l.lstrip().startswith("#")]
        self.assertGreater(len(comments), 20)
        self.assertTrue(stack.startswith("# Written by scripts/sync-stack from templates/stack.yaml"))
        for line in comments:
            self.assertNotIn(line + "\n", stack.split("\n", 1)[1])
        with tempfile.TemporaryDirectory(prefix="dt-sync-test.") as tmp:
            root = Path(tmp)
            shutil.copytree(ROOT / "cloudformation", root / "cloudformation")
            shutil.copytree(ROOT / "templates", root / "templates")
            edited = root / "templates" / "stack.yaml"
            edited.write_text(source.replace("VisibilityTimeout: 30", "VisibilityTimeout: 40"))
            self.assertEqual(sync("--check", "--root", root)[0], 1)
            self.assertEqual(sync("--root", root)[0], 0)
            written = (root / "cloudformation" / "dynamic-training.yaml").read_text()
            self.assertIn("VisibilityTimeout: 40", written)
            # An edit of the stack itself is drift too: the source wins.
            stack_file = root / "cloudformation" / "dynamic-training.yaml"
            stack_file.write_text(written.replace("VisibilityTimeout: 40", "VisibilityTimeout: 50"))
            self.assertEqual(sync("--check", "--root", root)[0], 1)

    def test_a_template_must_end_with_one_newline(self):
        with tempfile.TemporaryDirectory(prefix="dt-sync-test.") as tmp:
            root = Path(tmp)
            shutil.copytree(ROOT / "cloudformation", root / "cloudformation")
            shutil.copytree(ROOT / "templates", root / "templates")
            node = root / "templates" / "user-data" / "node.sh"
            node.write_text(node.read_text() + "\n")
            code, _, err = sync("--check", "--root", root)
            self.assertEqual(code, 1)
            self.assertIn("must end with exactly one newline", err)


if __name__ == "__main__":
    unittest.main()
