#!/usr/bin/env python3
"""Example prepare-data script: copies a data set from S3 to the shared file system (or a local
disk) with `aws s3 sync`, retried with exponential backoff. Standard library only; needs the AWS CLI.

`aws s3 sync` copies only what is missing or changed, so a retry, a second worker or a replaced
one resumes instead of starting over. The CLI runs as an argv, never through a shell, with the
usual AWS configuration (instance role, AWS_REGION, AWS_ENDPOINT_URL, ...).

Under `dtd agent` (DT_AGENT=1) it only exits 0 or non-zero with the reason on its last line: the
agent writes the markers. Run by hand with --ip, it writes DIR/prepare_data_success_<ip> or
DIR/prepare_data_failed_<ip> itself.
"""
import argparse
import collections
import contextlib
import ipaddress
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

PREFIX = "[s3_sync]"
TAIL_LINES = 20
# Bucket names: 3-63 of lowercase letters, digits, dots and hyphens; the key prefix is free-form
# but may not start a new option or hold control characters.
S3_URI = re.compile(r"^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/[^\x00-\x1f]*)?$")

tail = collections.deque(maxlen=TAIL_LINES)


class Failure(Exception):
    """A failure worth one clear last line."""


def say(msg, stream=None):
    for line in str(msg).splitlines() or [""]:
        line = f"{PREFIX} {line}"
        tail.append(line)
        print(line, file=stream or sys.stdout, flush=True)


def atomic_write(path, data):
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{os.path.basename(path)}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fchmod(f.fileno(), 0o644)
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_marker(shared_dir, ip, ok, body):
    success = os.path.join(shared_dir, f"prepare_data_success_{ip}")
    failed = os.path.join(shared_dir, f"prepare_data_failed_{ip}")
    target, stale = (success, failed) if ok else (failed, success)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(stale)
    atomic_write(target, (json.dumps(body) + "\n").encode())
    return target


def sync_argv(args):
    argv = [args.aws, "s3", "sync", args.source, args.dest, "--no-progress", "--only-show-errors"]
    if args.delete:
        argv.append("--delete")
    return argv


def sync_with_retries(args):
    argv = sync_argv(args)
    delay = args.backoff
    for attempt in range(1, args.attempts + 1):
        say(f"aws s3 sync {args.source} {args.dest} (attempt {attempt} of {args.attempts})")
        try:
            result = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True,
                                    text=True, timeout=args.timeout, check=False)
        except subprocess.TimeoutExpired:
            reason = f"timed out after {args.timeout:g}s"
        else:
            if result.returncode == 0:
                return
            say(result.stderr.strip() or result.stdout.strip(), sys.stderr)
            reason = f"aws s3 sync exited with {result.returncode}"
        if attempt == args.attempts:
            raise Failure(f"{reason}; gave up after {attempt} attempts")
        say(f"attempt {attempt} failed: {reason}; retrying in {delay:g}s")
        time.sleep(delay)
        delay = min(delay * 2, args.max_backoff)


def count_files(root):
    return sum(len(files) for _, _, files in os.walk(root))


def prepare(args):
    os.makedirs(args.dest, exist_ok=True)
    sync_with_retries(args)
    files = count_files(args.dest)
    if files < args.min_files:
        raise Failure(f"{args.dest} holds {files} files after the sync, expected at least "
                      f"{args.min_files} (is {args.source} right?)")
    say(f"{args.dest}: {files} files")
    return {"source": args.source, "path": args.dest, "files": files}


def ip_arg(text):
    try:
        if "%" in text:
            raise ValueError(text)
        return str(ipaddress.ip_address(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an IPv4/IPv6 address: {text!r}") from None


def s3_arg(text):
    if not S3_URI.match(text):
        raise argparse.ArgumentTypeError(f"not an s3://BUCKET[/PREFIX] URI: {text!r}")
    return text


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


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("source", type=s3_arg, help="s3://BUCKET/PREFIX to copy")
    p.add_argument("--shared-dir", required=True, metavar="DIR",
                   help="shared directory (EFS): markers go here, data under DIR/data")
    p.add_argument("--dest", metavar="DIR", help="where to copy to (default DIR/data)")
    p.add_argument("--ip", type=ip_arg,
                   help="this worker's private IP, to name the marker (not needed under dtd agent)")
    p.add_argument("--aws", default="aws", help="the AWS CLI program (default: aws on PATH)")
    p.add_argument("--delete", action="store_true",
                   help="also delete local files that are not in S3")
    p.add_argument("--min-files", type=int, default=1, metavar="N",
                   help="fail unless the destination then holds at least N files (default 1)")
    p.add_argument("--attempts", type=positive(int), default=5, help="sync attempts (default 5)")
    p.add_argument("--backoff", type=positive(float), default=2.0, metavar="SECONDS",
                   help="first pause between attempts, doubled each time (default 2)")
    p.add_argument("--max-backoff", type=positive(float), default=60.0, metavar="SECONDS",
                   help="longest pause between attempts (default 60)")
    p.add_argument("--timeout", type=positive(float), default=3600.0, metavar="SECONDS",
                   help="time limit of one sync (default 3600)")
    args = p.parse_args(argv)
    if not os.path.isdir(args.shared_dir):
        p.error(f"--shared-dir {args.shared_dir} is not a directory")
    args.dest = os.path.abspath(args.dest or os.path.join(args.shared_dir, "data"))
    if shutil.which(args.aws) is None:
        p.error(f"the AWS CLI {args.aws!r} is not installed or not executable")
    args.under_agent = os.environ.get("DT_AGENT") == "1"
    if not args.under_agent and args.ip is None:
        p.error("--ip is required to write the marker (or run it under dtd agent)")
    return args


def main(argv=None):
    args = parse_args(argv)
    start = time.monotonic()
    try:
        info = prepare(args)
    except (Failure, OSError) as e:
        failure = f"error: {e}"
    else:
        info["duration_s"] = round(time.monotonic() - start, 3)
        if not args.under_agent:
            say(f"marker: {write_marker(args.shared_dir, args.ip, True, info)}")
        say(f"ready: {info['path']}")
        return 0
    if not args.under_agent:
        body = {"exit_code": 1, "attempts": args.attempts,
                "duration_s": round(time.monotonic() - start, 3),
                "output_tail": list(tail) + [f"{PREFIX} {failure}"]}
        with contextlib.suppress(OSError):
            say(f"marker: {write_marker(args.shared_dir, args.ip, False, body)}", sys.stderr)
    say(failure, sys.stderr)  # the last line: what the agent and dtctl status show
    return 1


if __name__ == "__main__":
    sys.exit(main())
