"""The master's bootstrap reads the alerts' webhook URL from Secrets Manager into a file only root
reads (templates/user-data/master.sh, dt_webhook), which the master's dtd.yaml names
(`alerts[].webhook_file`): the secret is in no config, no user data and on no worker.

The test runs the function itself with bash and the real AWS CLI against moto (both from
.venv, scripts/setup), /etc/dt being a temporary directory (its path replaced in the function's
text) and `sleep` a no-op, so the retries of a secret that is not there take no time.

Run from the repository root: python3 -m unittest discover -s tests/python -v
"""
import os
import re
import subprocess
import tempfile
import unittest
from pathlib import Path

import aws_emulator

ROOT = Path(__file__).resolve().parents[2]
MASTER = ROOT / "templates" / "user-data" / "master.sh"
AWS = aws_emulator.AWS
URL = "https://hooks.slack.com/services/T0000/B0000/SeCrEtToKeN"


def webhook_function(etc, arn):
    """dt_webhook's text with the stack's values and /etc/dt moved to `etc`."""
    text = MASTER.read_text()
    body = re.search(r"^dt_webhook\(\) \{\n.*?^\}\n", text, re.M | re.S).group(0)
    body = body.replace("${AlertWebhookSecret}", arn).replace("${AWS::Region}", "us-east-1")
    return body.replace("/etc/dt/", f"{etc}/")


class WebhookSecretTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.moto, env = aws_emulator.start()
        cls.env = dict(os.environ, PATH=f"{AWS.parent}:{os.environ.get('PATH', '/usr/bin:/bin')}",
                       **env)
        # From a file: the AWS CLI (v1) would fetch an https:// parameter value instead.
        with tempfile.NamedTemporaryFile("w", suffix=".url") as value:
            value.write(URL)
            value.flush()
            out = subprocess.run([str(AWS), "secretsmanager", "create-secret", "--name",
                                  "dt-webhook", "--secret-string", f"file://{value.name}",
                                  "--query", "ARN", "--output", "text"],
                                 capture_output=True, text=True, env=cls.env, timeout=60)
        if out.returncode != 0:
            cls.moto.kill()
            raise AssertionError(f"create-secret: {out.stderr}")
        cls.arn = out.stdout.strip()

    @classmethod
    def tearDownClass(cls):
        cls.moto.kill()
        cls.moto.wait()

    def run_webhook(self, arn):
        tmp = tempfile.TemporaryDirectory(prefix="dt-webhook-test.")
        self.addCleanup(tmp.cleanup)
        etc = Path(tmp.name)
        script = "sleep() { :; }\n" + webhook_function(etc, arn) + "dt_webhook\n"
        r = subprocess.run(["bash", "-euo", "pipefail", "-c", script], capture_output=True,
                           text=True, env=self.env, timeout=120)
        return r, etc

    def test_the_secret_becomes_a_file_only_its_owner_reads(self):
        r, etc = self.run_webhook(self.arn)
        self.assertEqual(r.returncode, 0, r.stderr)
        webhook = etc / "webhook"
        self.assertEqual(webhook.read_text().strip(), URL)
        self.assertEqual(webhook.stat().st_mode & 0o777, 0o600)
        self.assertEqual(webhook.stat().st_uid, os.geteuid())
        self.assertNotIn("SeCrEtToKeN", r.stdout + r.stderr)
        self.assertFalse((etc / "webhook.new").exists())

    def test_no_secret_configured_writes_nothing(self):
        r, etc = self.run_webhook("")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(list(etc.iterdir()), [])

    def test_a_secret_that_cannot_be_read_fails_the_bootstrap(self):
        arn = self.arn.rsplit(":", 1)[0] + ":not-there-AbCdEf"
        r, etc = self.run_webhook(arn)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("reading the webhook secret failed (attempt 5)", r.stdout)
        self.assertIn(f"no webhook URL in {arn}", r.stdout)
        self.assertFalse((etc / "webhook").exists())


if __name__ == "__main__":
    unittest.main()
