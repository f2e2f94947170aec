"""moto's server on a free loopback port for the Python tests, with the AWS CLI's environment
pointed at it. Both come from .venv (scripts/setup); a test that needs them fails, and says to run
scripts/setup, when they are missing: it never skips."""
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = ROOT / ".venv" / "bin"
MOTO = Path(os.environ.get("DT_MOTO_SERVER", VENV_BIN / "moto_server"))
AWS = Path(os.environ.get("DT_AWS_CLI", VENV_BIN / "aws"))
sys.path.insert(0, str(ROOT / "scripts"))
from free_port import free_port  # noqa: E402  (outside the ephemeral range: why there)


def start():
    """(the moto process, the environment for the AWS CLI and SDKs to reach it)."""
    missing = [str(p) for p in (MOTO, AWS) if not p.exists()]
    if missing:
        raise AssertionError(f"missing {', '.join(missing)}: run scripts/setup")
    port = free_port()
    moto = subprocess.Popen([str(MOTO), "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    env = {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
           "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
           "AWS_DEFAULT_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true"}
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/moto-api/", timeout=1)
            return moto, env
        except OSError:
            if time.monotonic() > deadline:
                moto.kill()
                raise
            time.sleep(0.1)
