"""The stack refuses a TrainingScript outside the job's root-owned directory, before it creates
anything: CloudFormation checks a parameter against its AllowedPattern and answers with its
ConstraintDescription (templates/stack.yaml). The script runs on every worker, so it must be
where no worker can change it or put a module beside it: below /myEFSvolume/job, which the
master keeps root's, mode 0755, and not in its run/, which is the job's own.

CloudFormation's patterns are Java regular expressions ("Using regular expressions in
CloudFormation templates"); the one here uses only what Java and Python read alike (classes,
groups, `?!` lookahead), so Python's re answers as CloudFormation would.

Run from the repository root: python3 -m unittest discover -s tests/python -v
"""
import re
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STACK = ROOT / "cloudformation" / "dynamic-training.yaml"


def parameter(name):
    """The parameter's lines of the stack as it is deployed."""
    text = STACK.read_text()
    block = text[text.index(f"\n  {name}:\n"):]
    return block[:re.search(r"\n  \w+:\n", block[1:]).start() + 1]


def allowed(name):
    """Its AllowedPattern, a YAML double-quoted string (backslashes doubled)."""
    quoted = re.search(r'AllowedPattern: "((?:[^"\\]|\\.)*)"', parameter(name)).group(1)
    return re.compile(quoted.replace("\\\\", "\\"))


class TrainingScriptTest(unittest.TestCase):
    def test_a_script_below_the_jobs_root_owned_directory_is_accepted(self):
        pattern = allowed("TrainingScript")
        for value in ("", "/myEFSvolume/job/train.py",
                      "/myEFSvolume/job/train.py,--epochs,90,--lr=0.1",
                      "/myEFSvolume/job/cifar/train.py,--data,../data",
                      "/myEFSvolume/job/run.py", "/myEFSvolume/job/runs/train.py"):
            self.assertRegex(value, pattern)

    def test_a_script_anywhere_else_is_refused_with_a_reason(self):
        pattern = allowed("TrainingScript")
        for value in ("/myEFSvolume/train.py", "train.py", "/opt/train.py",
                      "/myEFSvolume/jobs/train.py", "/myEFSvolume/job",
                      "/myEFSvolume/job/run/train.py", "/myEFSvolume/job//run/train.py",
                      "/myEFSvolume/job/./run/train.py", "/myEFSvolume/job/../train.py",
                      "/myEFSvolume/job/x/../../train.py", "/myEFSvolume/job/.hidden.py",
                      ",/myEFSvolume/job/train.py", "/myEFSvolume/job/train.py,"):
            self.assertIsNone(pattern.fullmatch(value), value)
        self.assertIn("ConstraintDescription: the script must be below /myEFSvolume/job, not in run/",
                      parameter("TrainingScript"))


if __name__ == "__main__":
    unittest.main()
