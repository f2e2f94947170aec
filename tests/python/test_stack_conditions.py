"""Every IAM condition key the stack uses is one AWS documents: templates/stack.yaml names, in a
comment above its IAM roles, each key with the AWS page that defines it, and this test holds that
list equal to the keys the rendered stack's policies use (a key added without its page, or a
page's key no longer used, fails). An undocumented key is not an error to IAM: a condition on a
key the request never carries is simply false (or, with IfExists, true), so a policy resting on
one protects nothing, as the worker role's CreateTags condition on `aws:ARN` once did.

Run from the repository root: python3 -m unittest discover -s tests/python -v
"""
import re
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "templates" / "stack.yaml"
STACK = ROOT / "cloudformation" / "dynamic-training.yaml"

SERVICES = "aws|ec2|elasticfilesystem|iam|ssm|ssmmessages|sqs|events|autoscaling|secretsmanager"
# A condition key as a YAML mapping key: at the start of a line or after `{`, then `: `. Actions
# are values (`- ec2:CreateTags`, `Action: sts:AssumeRole`), never keys.
USED = re.compile(rf'(?:^\s*|\{{\s*)"?((?:{SERVICES}):[A-Za-z][\w/:.-]*?)"?:\s', re.M)
CITED = re.compile(rf"\b((?:{SERVICES}):[A-Za-z][\w]*(?:/\$\{{TagKey\}})?)")
# The page each cited group ends with.
PAGES = re.compile(r'"(AWS global condition context keys|Actions, resources, and condition keys '
                   r'for [^"]+)"$')


def cited_block():
    """The comment above the IAM roles that lists the keys and their pages, as one line of text."""
    text = SOURCE.read_text()
    start = text.index("  # Condition keys: every one this template uses")
    lines = []
    for line in text[start:].splitlines():
        if not line.lstrip().startswith("#"):
            break
        lines.append(line.lstrip()[1:].strip())
    return " ".join(lines)


def used_keys():
    """The condition keys of the rendered stack, a tag key's name as the pages write it."""
    keys = set(USED.findall(STACK.read_text()))
    return {re.sub(r"^aws:ResourceTag/.*", "aws:ResourceTag/${TagKey}", k) for k in keys}


class ConditionKeysTest(unittest.TestCase):
    def test_every_condition_key_used_is_cited_with_its_page_and_no_other(self):
        block = cited_block()
        cited = set(CITED.findall(block)) - {"aws:ResourceTag"}
        self.assertEqual(used_keys(), cited, "keys used (left) and cited (right) differ")

    def test_each_cited_key_is_followed_by_the_page_that_defines_it(self):
        # After the introduction (up to its colon), groups end with `;` or `.`: keys, then the
        # page's title in quotes.
        groups = cited_block().split("lists equal):", 1)[1].rstrip(".").split(";")
        for group in groups:
            keys = CITED.findall(group)
            self.assertTrue(keys, f"a group without keys: {group}")
            self.assertRegex(group.strip(), PAGES, f"no page for {keys}")
        self.assertEqual(len(groups), 4)

    def test_the_finder_sees_keys_in_both_yaml_forms(self):
        # The test is only as good as its finder: block and flow mappings, quoted or not, and no
        # action names.
        sample = (
            '              Bool: { aws:SecureTransport: "false" }\n'
            "              StringEquals:\n"
            "                aws:ResourceTag/dt:cluster: !Ref AWS::StackName\n"
            '              "Null":\n'
            '                "aws:TagKeys": "false"\n'
            "            Action: ec2:CreateTags\n"
            "              - ec2:DescribeInstances\n"
        )
        self.assertEqual(set(USED.findall(sample)),
                         {"aws:SecureTransport", "aws:ResourceTag/dt:cluster", "aws:TagKeys"})

    def test_the_worker_role_tags_nothing(self):
        # dtd agent's key is no longer put on a tag (nor believed from one): the worker role has
        # no EC2 action at all.
        stack = STACK.read_text()
        worker = stack[stack.index("  WorkerPolicy:"):stack.index("  WorkerInstanceProfile:")]
        self.assertNotIn("ec2:", worker)
        self.assertNotIn("aws:ARN", stack)


if __name__ == "__main__":
    unittest.main()
