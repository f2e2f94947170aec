#!/usr/bin/env python3
"""The default health check of `dtd agent` (agent.health.command): are this worker's GPUs fit to train?

  gpu_health.py [--instance-type TYPE] [--gpus N] [--kernel-log FILE] [--ignore-xid N,N]
                [--call-timeout SECONDS] [--no-gpu-count] [--no-ecc] [--no-xid] [--no-temperature]

Checks, each of which can be turned off:
  gpu count    nvidia-smi sees as many GPUs as the instance type has (from --gpus, or the table
               below by --instance-type or DT_INSTANCE_TYPE, which dtd agent sets from the
               instance metadata); an unknown type skips the check with a note.
  ecc          no GPU has uncorrectable ECC errors since the driver loaded (volatile count).
  xid          no NVIDIA Xid error in the kernel log since boot (`dmesg`, or --kernel-log FILE).
  temperature  no GPU is at or over its slowdown temperature.

Prints one line per finding, then a last line that is the verdict (dtd agent's `reason`), and
exits as dtd agent reads it: 0 healthy; 3 the GPUs are gone (fewer than the instance type has,
nvidia-smi cannot reach them, or Xid 79 "fallen off the bus"): the job loses the worker now;
1 otherwise unhealthy (the worker is drained). Programs are run as argv lists, never a shell,
each with its own time limit (--call-timeout, default 30s: keep three of them under
agent.health.timeout), so a hung nvidia-smi fails the check instead of hanging it.
Standard library only.
"""
import argparse
import os
import re
import subprocess
import sys

HEALTHY, UNHEALTHY, GPUS_LOST = 0, 1, 3

# GPUs per instance type: Amazon EC2 "Accelerated computing instance specifications"
# (docs.aws.amazon.com/ec2/latest/instancetypes/ac.html) and the AWS Batch User Guide,
# "Run GPU jobs" (docs.aws.amazon.com/batch/latest/userguide/gpu-jobs.html).
ONE = "xlarge 2xlarge 4xlarge 8xlarge 16xlarge"
GPUS = {
    "p3.2xlarge": 1, "p3.8xlarge": 4, "p3.16xlarge": 8, "p3dn.24xlarge": 8,
    "p4d.24xlarge": 8, "p4de.24xlarge": 8, "p5.4xlarge": 1, "p5.48xlarge": 8,
    "p5e.48xlarge": 8, "p5en.48xlarge": 8, "p6-b200.48xlarge": 8,
    "g3s.xlarge": 1, "g3.4xlarge": 1, "g3.8xlarge": 2, "g3.16xlarge": 4,
    "g4dn.12xlarge": 4, "g4dn.metal": 8,
    "g5g.16xlarge": 2, "g5g.metal": 2,
}
for family in ("g4dn", "g5", "g6", "g6e", "g5g"):
    for size in ONE.split():
        GPUS.setdefault(f"{family}.{size}", 1)
for family in ("g5", "g6", "g6e"):
    GPUS.update({f"{family}.12xlarge": 4, f"{family}.24xlarge": 4, f"{family}.48xlarge": 8})

# What the Xids a hardware fault leaves mean: NVIDIA, "XID Errors" (docs.nvidia.com/deploy/xid-errors).
XID_NAMES = {
    13: "graphics engine exception", 31: "GPU memory page fault", 43: "GPU stopped processing",
    45: "preemptive cleanup after earlier errors", 48: "double-bit ECC error",
    61: "internal micro-controller breakpoint", 62: "internal micro-controller halt",
    63: "ECC page retirement or row remapping event", 64: "ECC page retirement or row remapping failure",
    74: "NVLink error", 79: "GPU has fallen off the bus", 92: "high single-bit ECC error rate",
    94: "contained ECC error", 95: "uncontained ECC error", 119: "GSP RPC timeout", 120: "GSP error",
}
# The GPU is gone from the bus: no drain can use it.
XID_GPUS_LOST = {79}
# What nvidia-smi prints when it cannot reach a GPU or the driver at all.
LOST_SIGNS = ("GPU is lost", "Unable to determine the device handle", "No devices were found",
              "couldn't communicate with the NVIDIA driver")
XID_LINE = re.compile(r"NVRM: Xid \((?P<dev>[^)]*)\): (?P<xid>\d+)")
# The last part of the kernel log read from a file: enough for a boot's NVIDIA messages.
KERNEL_LOG_BYTES = 16 * 1024 * 1024
MAX_FINDINGS = 20


class CallFailed(Exception):
    """A program the check runs could not give an answer (not found, failed, timed out)."""


def run(argv, timeout):
    """Runs argv and returns its output; past `timeout` it is killed. It stays in the check's
    process group, so that dtd agent, killing the check at its own timeout, kills it too."""
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT)
    except OSError as e:
        raise CallFailed(f"cannot run {argv[0]}: {e.strerror or e}") from None
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        # Not read to its end: a child it left behind could hold the pipe open for ever.
        proc.stdout.close()
        raise CallFailed(f"{argv[0]} did not answer within {timeout:g}s") from None
    text = out.decode("utf-8", "replace")
    if proc.returncode != 0:
        last = next((l.strip() for l in reversed(text.splitlines()) if l.strip()), "")
        raise CallFailed(f"{argv[0]} failed (exit {proc.returncode}): {last[:200]}")
    return text


class Check:
    def __init__(self, args):
        self.args = args
        self.problems = []  # (exit code, reason)
        self.notes = 0

    def say(self, line):
        if self.notes < MAX_FINDINGS:
            print(line, flush=True)
        self.notes += 1

    def fail(self, code, reason):
        self.say(f"FAIL {reason}")
        self.problems.append((code, reason))

    def smi(self, *args):
        return run(["nvidia-smi", *args], self.args.call_timeout)


def expected_gpus(args):
    """The GPU count to expect and where it came from, or None with why not."""
    if args.gpus is not None:
        return args.gpus, "--gpus"
    itype = args.instance_type or os.environ.get("DT_INSTANCE_TYPE", "")
    if not itype:
        return None, "no instance type (DT_INSTANCE_TYPE or --instance-type); pass --gpus N"
    if itype not in GPUS:
        return None, f"instance type {itype} is not in the table; pass --gpus N"
    return GPUS[itype], itype


def query_gpus(check):
    """One row per GPU nvidia-smi sees: (index, bus id, uncorrected volatile ECC total)."""
    try:
        text = check.smi("--query-gpu=index,pci.bus_id,ecc.errors.uncorrected.volatile.total",
                         "--format=csv,noheader,nounits")
    except CallFailed as e:
        lost = any(sign in str(e) for sign in LOST_SIGNS)
        check.fail(GPUS_LOST if lost else UNHEALTHY, f"GPUs unreachable: {e}" if lost else str(e))
        return None
    return [[f.strip() for f in line.split(",")] for line in text.splitlines() if line.strip()]


def check_count(check, rows):
    want, source = expected_gpus(check.args)
    if want is None:
        check.say(f"gpu count: skipped, {source}")
    elif len(rows) < want:
        check.fail(GPUS_LOST, f"{len(rows)} of {want} GPUs visible ({source} has {want})")
    else:
        check.say(f"gpu count: {len(rows)} of {want} ({source})")


def check_ecc(check, rows):
    bad = [(r[0], r[2]) for r in rows if len(r) > 2 and r[2].isdigit() and int(r[2]) > 0]
    for index, count in bad:
        check.fail(UNHEALTHY, f"GPU {index}: {count} uncorrectable ECC error(s)")
    if not bad:
        check.say("ecc: no uncorrectable errors")


def kernel_log(check):
    path = check.args.kernel_log
    if path is None:
        return run(["dmesg"], check.args.call_timeout)
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.fstat(f.fileno()).st_size - KERNEL_LOG_BYTES))
            return f.read(KERNEL_LOG_BYTES).decode("utf-8", "replace")
    except OSError as e:
        raise CallFailed(f"cannot read {path}: {e.strerror or e}") from None


def check_xid(check):
    try:
        text = kernel_log(check)
    except CallFailed as e:
        check.fail(UNHEALTHY, f"cannot read the kernel log ({e}); use --kernel-log FILE or --no-xid")
        return
    seen = {}
    for m in XID_LINE.finditer(text):
        xid = int(m["xid"])
        if xid not in check.args.ignore_xid:
            seen.setdefault(xid, m["dev"])
    for xid, dev in sorted(seen.items()):
        name = XID_NAMES.get(xid, "see NVIDIA's Xid catalog")
        check.fail(GPUS_LOST if xid in XID_GPUS_LOST else UNHEALTHY, f"Xid {xid} ({name}) on {dev}")
    if not seen:
        check.say("xid: none in the kernel log since boot")


def temperatures(text):
    """(GPU, current, slowdown) from `nvidia-smi -q -d TEMPERATURE`; None where it says N/A."""
    gpus, gpu = [], None
    for line in text.splitlines():
        if re.match(r"^GPU [0-9A-Fa-f:.]+\s*$", line):
            gpu = [line.split()[1], None, None]
            gpus.append(gpu)
        elif gpu is not None and ":" in line:
            key, _, value = (s.strip() for s in line.partition(":"))
            number = re.match(r"^(\d+) C$", value)
            if key in ("GPU Current Temp", "GPU Slowdown Temp") and number:
                gpu[1 if key == "GPU Current Temp" else 2] = int(number[1])
    return gpus


def check_temperature(check):
    # "GPU Current Temp" and "GPU Slowdown Temp" (the temperature at which the GPU starts HW
    # slowdown): nvidia-smi(1), GPU ATTRIBUTES, "Temperature".
    try:
        gpus = temperatures(check.smi("-q", "-d", "TEMPERATURE"))
    except CallFailed as e:
        check.fail(UNHEALTHY, str(e))
        return
    hot = [(bus, now, limit) for bus, now, limit in gpus if None not in (now, limit) and now >= limit]
    for bus, now, limit in hot:
        check.fail(UNHEALTHY, f"GPU {bus} at {now} C, at or over its slowdown temperature {limit} C")
    if not hot:
        check.say(f"temperature: {len(gpus)} GPU(s) below their slowdown temperature")


def verdict(check):
    if not check.problems:
        print("ok: the GPUs passed every check", flush=True)
        return HEALTHY
    code = GPUS_LOST if any(c == GPUS_LOST for c, _ in check.problems) else UNHEALTHY
    # The reason people see first: GPUs lost before the rest.
    reasons = [r for c, r in check.problems if c == code] + [r for c, r in check.problems if c != code]
    print("; ".join(reasons)[:300], flush=True)
    return code


def xid_list(text):
    try:
        return {int(x) for x in text.split(",") if x.strip()}
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of Xid numbers: {text}") from None


def parse_args(argv):
    p = argparse.ArgumentParser(description="GPU health check for dtd agent (exit 0 ok, 1 unhealthy, 3 GPUs gone)")
    p.add_argument("--instance-type", help="EC2 instance type (default: $DT_INSTANCE_TYPE)")
    p.add_argument("--gpus", type=int, help="GPUs to expect, whatever the instance type")
    p.add_argument("--kernel-log", help="read the kernel log from this file instead of dmesg")
    p.add_argument("--ignore-xid", type=xid_list, default=set(), help="Xids that do not count, e.g. 13,31,43")
    p.add_argument("--call-timeout", type=float, default=30.0, help="seconds each program may take")
    for name in ("gpu-count", "ecc", "xid", "temperature"):
        p.add_argument(f"--no-{name}", action="store_true", help=f"skip the {name} check")
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    check = Check(args)
    if not (args.no_gpu_count and args.no_ecc):
        rows = query_gpus(check)
        if rows is not None:
            if not args.no_gpu_count:
                check_count(check, rows)
            if not args.no_ecc:
                check_ecc(check, rows)
    if not args.no_xid:
        check_xid(check)
    if not args.no_temperature and not any(c == GPUS_LOST for c, _ in check.problems):
        check_temperature(check)
    return verdict(check)


if __name__ == "__main__":
    sys.exit(main())
