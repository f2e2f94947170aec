#!/usr/bin/env python3
"""Example prepare-data script: builds one worker's synthetic dataset on the shared file system,
verifies it, and writes the readiness marker the daemon looks for. Standard library only.

Success: DIR/prepare_data_success_<ip> (JSON: ip, samples, sha256, duration_s).
Failure: DIR/prepare_data_failed_<ip> (JSON: exit_code, attempts, duration_s, output_tail), exit 1.
Run by `dtd agent` (DT_AGENT=1 in the environment), it writes no marker: the agent writes it from
the exit status, after its retries. --shared-dir and --ip then default to DT_SHARED_DIR and DT_IP.

It imports dtprepare.py, which must sit next to it: run directly (or by `dtd agent`), Python puts
the script's own directory on sys.path. Copy both, root's, into a directory only root writes
(dtd agent refuses anything else), e.g. /myEFSvolume/prepare/prepare-data.py and
/myEFSvolume/prepare/dtprepare.py.
"""
import argparse
import hashlib
import math
import os
import random
import sys
import time

import dtprepare
from dtprepare import atomic_write, ip_arg

PREFIX = "[synthetic]"
FEATURES = 8

output = dtprepare.Output(PREFIX)
say = output.say


def make_csv(samples, seed):
    rng = random.Random(seed)
    true_w = [rng.gauss(0, 1) for _ in range(FEATURES)]
    rows = [",".join([f"x{k}" for k in range(FEATURES)] + ["y"])]
    for _ in range(samples):
        x = [rng.gauss(0, 1) for _ in range(FEATURES)]
        y = sum(w * v for w, v in zip(true_w, x)) + rng.gauss(0, 0.1)
        rows.append(",".join(f"{v:.6f}" for v in x + [y]))
    return ("\n".join(rows) + "\n").encode()


def verify(path, digest, samples):
    with open(path, "rb") as f:
        data = f.read()
    actual = hashlib.sha256(data).hexdigest()
    if actual != digest:
        raise RuntimeError(f"{path}: sha256 {actual} does not match the written {digest}")
    rows = data.count(b"\n") - 1  # minus the header
    if rows != samples:
        raise RuntimeError(f"{path}: {rows} rows, expected {samples}")


def prepare(args):
    say(f"preparing {args.samples} samples for {args.ip} (seed {args.seed})")
    if args.sleep:
        say(f"downloading (simulated, {args.sleep:g}s) ...")
        time.sleep(args.sleep)
    if args.fail:
        raise RuntimeError("simulated failure (--fail)")
    data_dir = os.path.join(args.shared_dir, "data")
    os.makedirs(data_dir, exist_ok=True)
    path = os.path.join(data_dir, f"synthetic-{args.ip}.csv")
    data = make_csv(args.samples, args.seed)
    digest = hashlib.sha256(data).hexdigest()
    atomic_write(path, data)
    say(f"wrote {path} ({len(data)} bytes)")
    verify(path, digest, args.samples)
    say(f"verified sha256 {digest}")
    return {"ip": args.ip, "samples": args.samples, "sha256": digest}


class Parser(argparse.ArgumentParser):
    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


def number(kind, minimum):
    def convert(text):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if not math.isfinite(value):  # nan/inf: --sleep nan left a failure marker for a typo
            raise argparse.ArgumentTypeError(f"not a finite number: {text!r}")
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}: {text!r}")
        return value
    return convert


def parse_args(argv):
    p = Parser(description=__doc__.splitlines()[0])
    env_dir, env_ip = os.environ.get("DT_SHARED_DIR"), os.environ.get("DT_IP")
    p.add_argument("--shared-dir", required=env_dir is None, default=env_dir, metavar="DIR",
                   help="shared directory (EFS) where data and markers go (default $DT_SHARED_DIR)")
    p.add_argument("--ip", required=env_ip is None, default=env_ip, type=ip_arg,
                   help="this worker's private IP (default $DT_IP)")
    p.add_argument("--samples", type=number(int, 1), default=1024, help="rows (default 1024)")
    p.add_argument("--seed", type=int, help="data seed (default derived from the IP)")
    p.add_argument("--fail", action="store_true", help="simulate a failure: exit 1")
    p.add_argument("--sleep", type=number(float, 0), default=0.0, metavar="SECONDS",
                   help="sleep first, standing in for a download (default 0)")
    args = p.parse_args(argv)
    dtprepare.check_shared_dir(p, args)
    if args.seed is None:
        args.seed = int.from_bytes(hashlib.sha256(args.ip.encode()).digest()[:4], "big")
    return args


def main(argv=None):
    args = parse_args(argv)
    start = time.monotonic()
    try:
        info = prepare(args)
        info["duration_s"] = dtprepare.elapsed(start)
        say(ready_line(args, info))
        return 0
    except Exception as e:  # any failure must leave a failure marker, not just a traceback
        say(f"error: {e}", sys.stderr)
    if not dtprepare.under_agent():
        leave_failure_marker(args, start)
    return 1


def ready_line(args, info):
    if dtprepare.under_agent():
        return "ready (dtd agent writes the marker)"
    return f"ready: {dtprepare.write_marker(args.shared_dir, args.ip, True, info)}"


def leave_failure_marker(args, start):
    body = dtprepare.failure_body(1, start, list(output.tail))
    try:
        marker = dtprepare.write_marker(args.shared_dir, args.ip, False, body)
    except OSError as e:
        say(f"error: cannot write the failure marker: {e}", sys.stderr)
    else:
        say(f"failed: {marker}", sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
