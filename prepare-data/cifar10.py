#!/usr/bin/env python3
"""Example prepare-data script: downloads CIFAR-10 (the 2018 example's data set) to the shared file
system, verifies its checksum, and unpacks it. Standard library only.

Downloads are retried with exponential backoff, and a corrupt download counts as a failed attempt.
Workers that share the directory may run it at once: each downloads to its own temp file and the
unpacked directory appears by an atomic rename, so a worker that finds it already there is done.

Under `dtd agent` (DT_AGENT=1) it only exits 0 or non-zero with the reason on its last line: the
agent writes the markers. Run by hand with --ip, it writes DIR/prepare_data_success_<ip> or
DIR/prepare_data_failed_<ip> itself.

It imports dtprepare.py, which must sit next to it: run directly (or by `dtd agent`), Python puts
the script's own directory on sys.path. Copy both, root's, into a directory only root writes
(dtd agent refuses anything else), e.g. /myEFSvolume/prepare/prepare-data.py and
/myEFSvolume/prepare/dtprepare.py.
"""
import argparse
import contextlib
import hashlib
import os
import shutil
import sys
import tarfile
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

import dtprepare
from dtprepare import Failure, positive

PREFIX = "[cifar10]"
URL = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
# The archive's published checksum (as torchvision and the 2018 example verify it).
CHECKSUM = "md5:c58f30108f718f92721af3b95e74349a"
TOP = "cifar-10-batches-py"
CHUNK = 1 << 20

output = dtprepare.Output(PREFIX)
say = output.say


def download(url, dest_dir, algorithm, expected, timeout):
    """One attempt: stream to a temp file in dest_dir, hashing as it goes; returns its path."""
    fd, tmp = tempfile.mkstemp(dir=dest_dir, prefix=".cifar10-download.")
    digest = hashlib.new(algorithm)
    size = 0
    try:
        with os.fdopen(fd, "wb") as out, urllib.request.urlopen(url, timeout=timeout) as resp:
            while chunk := resp.read(CHUNK):
                digest.update(chunk)
                out.write(chunk)
                size += len(chunk)
        actual = digest.hexdigest()
        if actual != expected:
            raise Failure(f"checksum mismatch: {algorithm} {actual}, expected {expected}")
        say(f"downloaded {size} bytes, {algorithm} verified")
        return tmp
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def download_with_retries(args, algorithm, expected):
    delay = args.backoff
    for attempt in range(1, args.attempts + 1):
        say(f"downloading {args.url} (attempt {attempt} of {args.attempts})")
        try:
            return download(args.url, args.dest, algorithm, expected, args.timeout)
        except (Failure, OSError, urllib.error.URLError) as e:
            reason = e.reason if isinstance(e, urllib.error.URLError) else e
            if attempt == args.attempts:
                raise Failure(f"download failed after {attempt} attempts: {reason}") from None
            say(f"attempt {attempt} failed: {reason}; retrying in {delay:g}s")
            time.sleep(delay)
            delay = min(delay * 2, args.max_backoff)
    raise Failure("no attempt made")  # --attempts is at least 1; kept for clarity


def safe_members(archive):
    """Only plain files and directories under TOP: no links, devices or paths that escape."""
    for m in archive.getmembers():
        parts = m.name.split("/")
        if m.name.startswith("/") or ".." in parts or parts[0] != TOP:
            raise Failure(f"archive member {m.name!r} is outside {TOP}/")
        if not (m.isfile() or m.isdir()):
            raise Failure(f"archive member {m.name!r} is not a plain file or directory")
        yield m


def unpack(archive_path, dest):
    staging = tempfile.mkdtemp(dir=dest, prefix=".cifar10-unpack.")
    try:
        with tarfile.open(archive_path, "r:gz") as archive:
            members = list(safe_members(archive))
            # The members were checked above; the data filter, where Python has it, checks again.
            extra = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
            archive.extractall(staging, members=members, **extra)
        try:
            os.rename(os.path.join(staging, TOP), os.path.join(dest, TOP))
        except OSError:
            # Another worker got there first: its copy was verified the same way.
            if not os.path.isdir(os.path.join(dest, TOP)):
                raise
            say(f"{TOP} appeared meanwhile (another worker); keeping it")
        return len([m for m in members if m.isfile()])
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def prepare(args):
    algorithm, _, expected = args.checksum.partition(":")
    target = os.path.join(args.dest, TOP)
    if os.path.isdir(target) and not args.force:
        say(f"{target} is already there; nothing to download")
        return {"path": target, "downloaded": False}
    os.makedirs(args.dest, exist_ok=True)
    archive = download_with_retries(args, algorithm, expected.lower())
    try:
        files = unpack(archive, args.dest)
    except (tarfile.TarError, EOFError) as e:
        raise Failure(f"cannot unpack the archive: {e}") from None
    finally:
        with contextlib.suppress(OSError):
            os.unlink(archive)
    say(f"unpacked {files} files into {target}")
    return {"path": target, "downloaded": True, "files": files}


def checksum_arg(text):
    algorithm, sep, value = text.partition(":")
    sizes = {"md5": 32, "sha1": 40, "sha256": 64, "sha512": 128}
    if not sep or algorithm not in sizes or len(value) != sizes[algorithm] or any(
            c not in "0123456789abcdefABCDEF" for c in value):
        raise argparse.ArgumentTypeError(
            f"want ALGORITHM:HEX with md5, sha1, sha256 or sha512, got {text!r}")
    return text


def url_arg(text):
    if urllib.parse.urlsplit(text).scheme not in ("https", "http"):
        raise argparse.ArgumentTypeError(f"not an http(s) URL: {text!r}")
    return text


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shared-dir", required=True, metavar="DIR",
                   help="shared directory (EFS): markers go here, data under DIR/data")
    p.add_argument("--dest", metavar="DIR", help="where to unpack (default DIR/data)")
    dtprepare.add_ip_arg(p)
    p.add_argument("--url", type=url_arg, default=URL, help=f"archive URL (default {URL})")
    p.add_argument("--checksum", type=checksum_arg, default=CHECKSUM,
                   help=f"ALGORITHM:HEX of the archive (default {CHECKSUM})")
    p.add_argument("--attempts", type=positive(int), default=5, help="download attempts (default 5)")
    p.add_argument("--backoff", type=positive(float), default=2.0, metavar="SECONDS",
                   help="first pause between attempts, doubled each time (default 2)")
    p.add_argument("--max-backoff", type=positive(float), default=60.0, metavar="SECONDS",
                   help="longest pause between attempts (default 60)")
    p.add_argument("--timeout", type=positive(float), default=60.0, metavar="SECONDS",
                   help="network timeout of one read (default 60)")
    p.add_argument("--force", action="store_true", help="download even if the data is there")
    args = p.parse_args(argv)
    dtprepare.check_shared_dir(p, args)
    args.dest = args.dest or os.path.join(args.shared_dir, "data")
    dtprepare.check_ip(p, args)
    return args


def main(argv=None):
    return dtprepare.run(prepare, parse_args(argv), output)


if __name__ == "__main__":
    sys.exit(main())
