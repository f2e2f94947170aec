"""What the example prepare-data scripts in this directory share: their prefixed output and its
tail, the readiness markers the daemon looks for (written with dt_atomic.py), the --ip and
DT_AGENT handling, and the end of main(). Standard library and dt_atomic.py only.

The scripts import it as `import dtprepare`, and it imports `dt_atomic`. That works because they
are run directly (`python3 prepare-data/cifar10.py ...`, or as an executable by `dtd agent`), and
Python then puts the script's own directory first on sys.path: keep this file and dt_atomic.py
next to the script you run, e.g. /myEFSvolume/prepare/dtprepare.py and dt_atomic.py beside
/myEFSvolume/prepare/prepare-data.py (a directory only root writes: anyone who could add a module
there would run code as root).
"""
import argparse
import collections
import contextlib
import ipaddress
import json
import os
import sys
import time

from dt_atomic import atomic_write

TAIL_LINES = 20


class Failure(Exception):
    """A failure worth one clear last line."""


class Output:
    """A script's printed lines, each under its prefix.

    The last lines are kept so that a failure marker shows what happened without anyone logging
    in to the worker.
    """

    def __init__(self, prefix, limit=TAIL_LINES):
        self.prefix = prefix
        self.tail = collections.deque(maxlen=limit)

    def line(self, msg):
        return f"{self.prefix} {msg}"

    def say(self, msg, stream=None):
        # Line by line, so that multi-line output (aws's stderr) counts against the tail's limit
        # as the lines it is.
        for text in str(msg).splitlines() or [""]:
            line = self.line(text)
            self.tail.append(line)
            print(line, file=stream or sys.stdout, flush=True)


def under_agent():
    """Run by `dtd agent`, which writes the markers itself from the exit status."""
    return os.environ.get("DT_AGENT") == "1"


def write_marker(shared_dir, ip, ok, body):
    """Write this run's marker and drop the other kind, so the markers show only the latest run."""
    success = os.path.join(shared_dir, f"prepare_data_success_{ip}")
    failed = os.path.join(shared_dir, f"prepare_data_failed_{ip}")
    target, stale = (success, failed) if ok else (failed, success)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(stale)
    atomic_write(target, (json.dumps(body) + "\n").encode())
    return target


def elapsed(start):
    return round(time.monotonic() - start, 3)


def failure_body(attempts, start, output_tail):
    """The failure marker's JSON, in the same fields `dtd agent` writes."""
    return {"exit_code": 1, "attempts": attempts, "duration_s": elapsed(start),
            "output_tail": output_tail}


def ip_arg(text):
    # Normalized, so the marker name is built only from a validated address. No IPv6 scope
    # (`%eth0`): the daemon's parser rejects it, so such a marker would never be seen.
    try:
        if "%" in text:
            raise ValueError(text)
        return str(ipaddress.ip_address(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an IPv4/IPv6 address: {text!r}") from None


def positive(kind):
    def convert(text):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if not value > 0:
            raise argparse.ArgumentTypeError(f"must be > 0: {text!r}")
        return value
    return convert


def add_ip_arg(parser):
    parser.add_argument(
        "--ip", type=ip_arg,
        help="this worker's private IP, to name the marker (not needed under dtd agent)")


def check_shared_dir(parser, args):
    if not os.path.isdir(args.shared_dir):
        parser.error(f"--shared-dir {args.shared_dir} is not a directory")


def check_ip(parser, args):
    # Only a run by hand writes a marker, and a marker needs the IP in its name.
    if not under_agent() and args.ip is None:
        parser.error("--ip is required to write the marker (or run it under dtd agent)")


def run(prepare, args, output):
    """main() of a script whose last line says why it failed, which `dtd agent` and `dtctl
    status` show. prepare(args) returns the success marker's JSON (with a "path") or raises
    Failure or OSError; args holds shared_dir, ip and attempts. Returns the exit code.
    """
    start = time.monotonic()
    try:
        info = prepare(args)
    except (Failure, OSError) as e:
        failure = f"error: {e}"
    else:
        info["duration_s"] = elapsed(start)
        if not under_agent():
            output.say(f"marker: {write_marker(args.shared_dir, args.ip, True, info)}")
        output.say(f"ready: {info['path']}")
        return 0
    if not under_agent():
        body = failure_body(args.attempts, start, list(output.tail) + [output.line(failure)])
        with contextlib.suppress(OSError):
            output.say(f"marker: {write_marker(args.shared_dir, args.ip, False, body)}",
                       sys.stderr)
    output.say(failure, sys.stderr)
    return 1
