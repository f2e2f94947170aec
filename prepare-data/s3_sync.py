#!/usr/bin/env python3
"""Example prepare-data script: copies a data set from S3 to the shared file system (or a local
disk) with `aws s3 sync`, retried with exponential backoff. Standard library only; needs the AWS CLI.

`aws s3 sync` copies only what is missing or changed, so a retry, a second worker or a replaced
one resumes instead of starting over. The CLI runs as an argv, never through a shell, with the
usual AWS configuration (instance role, AWS_REGION, AWS_ENDPOINT_URL, ...).

Under `dtd agent` (DT_AGENT=1) it only exits 0 or non-zero with the reason on its last line: the
agent writes the markers. Run by hand with --ip, it writes DIR/prepare_data_success_<ip> or
DIR/prepare_data_failed_<ip> itself.

It imports dtprepare.py, which must sit next to it: run directly (or by `dtd agent`), Python puts
the script's own directory on sys.path. Copy both, root's, into a directory only root writes
(dtd agent refuses anything else), e.g. /myEFSvolume/prepare/prepare-data.py and
/myEFSvolume/prepare/dtprepare.py.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import time

import dtprepare
from dtprepare import Failure, positive

PREFIX = "[s3_sync]"
# Bucket names: 3-63 of lowercase letters, digits, dots and hyphens; the key prefix is free-form
# but may not start a new option or hold control characters.
S3_URI = re.compile(r"^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/[^\x00-\x1f]*)?$")

output = dtprepare.Output(PREFIX)
say = output.say


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


def s3_arg(text):
    if not S3_URI.match(text):
        raise argparse.ArgumentTypeError(f"not an s3://BUCKET[/PREFIX] URI: {text!r}")
    return text


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("source", type=s3_arg, help="s3://BUCKET/PREFIX to copy")
    p.add_argument("--shared-dir", required=True, metavar="DIR",
                   help="shared directory (EFS): markers go here, data under DIR/data")
    p.add_argument("--dest", metavar="DIR", help="where to copy to (default DIR/data)")
    dtprepare.add_ip_arg(p)
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
    dtprepare.check_shared_dir(p, args)
    args.dest = os.path.abspath(args.dest or os.path.join(args.shared_dir, "data"))
    if shutil.which(args.aws) is None:
        p.error(f"the AWS CLI {args.aws!r} is not installed or not executable")
    dtprepare.check_ip(p, args)
    return args


def main(argv=None):
    return dtprepare.run(prepare, parse_args(argv), output)


if __name__ == "__main__":
    sys.exit(main())
