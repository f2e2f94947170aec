#!/usr/bin/env python3
"""A small, real elastic training job for dtd (simulated distribution, one process).

Linear regression by mini-batch SGD, the data sharded across the host file's workers and their
gradients averaged as an allreduce would. On SIGUSR1 it re-reads the host file at the next step
boundary, reshards, and acknowledges (2018 `host_worker_log` or `ack` file). It reports its step in
the `progress` file, for dtd's stall detection (`job.stall`). Standard library and dt_atomic.py
only: keep that beside this script (in the repository it is in prepare-data/).
"""
import argparse
import contextlib
import datetime
import ipaddress
import json
import math
import os
import random
import signal
import stat
import sys
import time

try:
    from dt_atomic import atomic_write, fsync_dir
except ImportError:  # in the repository: prepare-data/ beside examples/
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.realpath(__file__)), "..", "prepare-data"))
    from dt_atomic import atomic_write, fsync_dir

PREFIX = "[elastic_job]"
BATCH = 32
TIME_FMT = "%Y-%m-%d %H:%M:%S"


class UsageError(Exception):
    """Bad input from the user: reported in one line with exit code 2."""


def say(msg):
    print(f"{PREFIX} {msg}", flush=True)


def warn(msg):
    print(f"{PREFIX} warning: {msg}", file=sys.stderr, flush=True)


def parse_ip(text):
    if "%" in text:  # an IPv6 scope: the daemon never writes one, and its parser rejects it
        raise ValueError(f"IPv6 scope not allowed: {text!r}")
    return str(ipaddress.ip_address(text))


def parse_host_token(token):
    """`IP` or `IP:N` (also `[IPv6]:N`) -> normalized IP; raises ValueError."""
    with contextlib.suppress(ValueError):
        return parse_ip(token)  # a bare IPv6 wins over reading its last group as a slot count
    host, _, slots = token.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not host or not slots.isdecimal():
        raise ValueError(f"not an IP address: {token!r}")
    return parse_ip(host)


def read_hosts(path):
    """The ordered, de-duplicated IPs of a host file, or None if it cannot be read."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except (OSError, UnicodeDecodeError) as e:
        if not isinstance(e, FileNotFoundError):
            warn(f"cannot read host file {path}: {e}")
        return None
    hosts = {}
    for number, line in enumerate(lines, 1):
        fields = line.split("#", 1)[0].split()
        if not fields:
            continue
        try:
            ip = parse_host_token(fields[0])
            if fields[1:] and not (len(fields) == 2 and fields[1].startswith("slots=")
                                   and fields[1][6:].isdecimal()):
                raise ValueError(f"expected `IP slots=N`, got {line.strip()!r}")
            hosts[ip] = None
        except ValueError as e:
            warn(f"{path}:{number}: skipped: {e}")
    return list(hosts)


def parse_log_line(line):
    """`SEQ ADDED|REMOVED IP YYYY-mm-dd HH:MM:SS` -> (action, ip), or None if malformed."""
    fields = line.split()
    if len(fields) != 5 or not fields[0].isdecimal() or fields[1] not in ("ADDED", "REMOVED"):
        return None
    try:
        stamp = " ".join(fields[3:])
        if time.strftime(TIME_FMT, time.strptime(stamp, TIME_FMT)) != stamp:
            return None
        return fields[1], parse_ip(fields[2])
    except ValueError:
        return None


def read_log(path):
    """(membership the log implies, last SEQ, whether it ends with a newline)."""
    try:
        with open(path, "rb") as f:
            text = f.read().decode("utf-8", "replace")
    except FileNotFoundError:
        return [], 0, True
    lines = text.split("\n")
    # SEQ counts every line, even a broken one, so no reader ever sees a SEQ twice.
    last = max([int(f[0]) for f in map(str.split, lines) if f and f[0].isdecimal()], default=0)
    members = {}
    # An unterminated last line is an interrupted write, never a record.
    for action, ip in filter(None, map(parse_log_line, lines[:-1])):
        if action == "ADDED":
            members[ip] = None
        else:
            members.pop(ip, None)
    return list(members), last, text == "" or text.endswith("\n")


def append_log(path, changes):
    """Append `(action, ip)` changes as one write, so a crash loses the batch, not half a line."""
    _, last, ends_with_newline = read_log(path)
    stamp = time.strftime(TIME_FMT, time.gmtime())
    lines = [f"{last + i} {action} {ip} {stamp}\n" for i, (action, ip) in enumerate(changes, 1)]
    text = ("" if ends_with_newline else "\n") + "".join(lines)
    created = not os.path.exists(path)
    with open(path, "ab") as f:
        f.write(text.encode())
        f.flush()
        os.fsync(f.fileno())
    if created:
        fsync_dir(os.path.dirname(os.path.abspath(path)))


def read_generation(path):
    try:
        with open(path, encoding="utf-8") as f:
            generation = int(f.read().strip())
        if generation >= 0:
            return generation
        raise ValueError("negative")
    except (OSError, ValueError, UnicodeDecodeError) as e:
        warn(f"cannot read generation file {path} ({e}); not acknowledging")
        return None


class Trainer:
    def __init__(self, args):
        rng = random.Random(args.seed)
        true_w = [rng.gauss(0, 1) for _ in range(args.features)]
        true_b = rng.gauss(0, 1)
        self.data = []
        for _ in range(args.samples):
            x = [rng.gauss(0, 1) for _ in range(args.features)]
            y = sum(w * v for w, v in zip(true_w, x)) + true_b + rng.gauss(0, 0.1)
            self.data.append((x, y))
        self.lr, self.seed = args.lr, args.seed
        self.w, self.b = [0.0] * args.features, 0.0
        self.epoch = self.step_in_epoch = self.global_step = 0
        self.workers, self.shards = [], []
        self.rng = random.Random(self.seed)

    def set_workers(self, workers):
        n = len(workers)
        self.workers = list(workers)
        self.shards = [[i for i in range(len(self.data)) if i % n == k] for k in range(n)]

    def gradient(self, indices):
        gw, gb = [0.0] * len(self.w), 0.0
        for i in indices:
            err = self.error(i)
            gw = [g + 2 * err * v for g, v in zip(gw, self.data[i][0])]
            gb += 2 * err
        return [g / len(indices) for g in gw], gb / len(indices)

    def step(self):
        """One synchronous step: every worker's gradient on its shard, averaged (the allreduce)."""
        grads = [self.gradient(self.rng.sample(s, min(BATCH, len(s)))) for s in self.shards if s]
        for k in range(len(self.w)):
            self.w[k] -= self.lr * sum(g[0][k] for g in grads) / len(grads)
        self.b -= self.lr * sum(g[1] for g in grads) / len(grads)
        self.step_in_epoch += 1
        self.global_step += 1

    def error(self, i):
        x, y = self.data[i]
        return sum(w * v for w, v in zip(self.w, x)) + self.b - y

    def loss(self):
        return sum(self.error(i) ** 2 for i in range(len(self.data))) / len(self.data)

    def save(self, path):
        state = {"weights": self.w, "bias": self.b, "epoch": self.epoch,
                 "step_in_epoch": self.step_in_epoch, "global_step": self.global_step,
                 "loss": self.loss(), "workers": self.workers}
        atomic_write(path, (json.dumps(state, indent=1) + "\n").encode())
        return state["loss"]

    def load(self, path):
        """Resume from a checkpoint; a corrupt one is moved aside so we never overwrite evidence."""
        try:
            with open(path, encoding="utf-8") as f:
                state = json.load(f)
            w, b = [float(v) for v in state["weights"]], float(state["bias"])
            counters = [int(state[k]) for k in ("epoch", "step_in_epoch", "global_step")]
        except FileNotFoundError:
            return
        except (OSError, ValueError, KeyError, TypeError) as e:
            aside = path + ".corrupt"
            print(f"{PREFIX} checkpoint {path} is corrupt ({e}); moved to {aside}, starting fresh",
                  file=sys.stderr, flush=True)
            os.replace(path, aside)
            return
        if len(w) != len(self.w):
            raise UsageError(f"checkpoint {path} has {len(w)} features, --features {len(self.w)}")
        self.w, self.b = w, b
        self.epoch, self.step_in_epoch, self.global_step = counters
        self.rng = random.Random(self.seed * 1_000_003 + self.global_step)
        say(f"resumed from epoch {self.epoch}")


class Progress:
    """The `progress` file dtd reads for stall detection and checkpoint joins: `{"step": N,
    "time": RFC 3339, "pid": P}`, and `"checkpoint_step": C` once a checkpoint was saved.

    Replaced atomically after a step, at most once per `every` seconds (a step can be much shorter
    than a file write on EFS), and not fsynced: an update lost in a crash only makes dtd see the
    step a moment late. A failed write is warned about once and never stops training. Removed
    when the job stops on purpose, so a finished job is not taken for a stalled one; a job that
    dies leaves it, and its step stands still.
    """

    def __init__(self, path, every):
        self.path, self.every = path, every
        self.written_at = None  # time.monotonic() of the last write
        self.failing = False
        self.checkpoint_step = None

    def checkpointed(self, step):
        """A checkpoint was saved at `step`: said at once (dtd's join.at_checkpoint waits for it)."""
        self.checkpoint_step = step
        self.after_step(step, force=True)

    def after_step(self, step, force=False):
        now = time.monotonic()
        if not force and self.written_at is not None and now - self.written_at < self.every:
            return
        line = {"step": step, "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "pid": os.getpid()}
        if self.checkpoint_step is not None:
            line["checkpoint_step"] = self.checkpoint_step
        try:
            atomic_write(self.path, (json.dumps(line) + "\n").encode(), durable=False)
        except OSError as e:
            if not self.failing:
                warn(f"progress not written to {self.path}: {e}")
            self.failing = True
            return
        self.failing = False
        self.written_at = now

    def remove(self):
        # Only our own: a newer job may already be reporting there.
        with contextlib.suppress(OSError, ValueError, AttributeError):
            with open(self.path, encoding="utf-8") as f:
                if json.load(f).get("pid") == os.getpid():
                    os.unlink(self.path)


def diff(old, new):
    return [ip for ip in new if ip not in old], [ip for ip in old if ip not in new]


def acknowledge(args, generation, added, removed):
    # A failed ack must not stop training: the daemon's ack timeout covers a missing one.
    try:
        if args.ack == "log" and (added or removed):
            changes = [("ADDED", ip) for ip in added] + [("REMOVED", ip) for ip in removed]
            append_log(args.log, changes)
        elif args.ack == "file" and generation is not None:
            atomic_write(args.ack_file, f"{generation}\n".encode())
    except OSError as e:
        warn(f"acknowledgement not written: {e}")


def read_membership(args):
    # The daemon writes host files first, then the generation file: reading in the opposite
    # order can only acknowledge a generation at most as new as the host file we applied.
    generation = read_generation(args.generation_file) if args.ack == "file" else None
    return generation, read_hosts(args.hostfile)


def rescale(args, trainer):
    generation, hosts = read_membership(args)
    if hosts is None:
        warn(f"host file {args.hostfile} is unreadable; keeping {len(trainer.workers)} workers")
        return
    added, removed = diff(trainer.workers, hosts)
    trainer.set_workers(hosts)
    say(f"rescale: +[{', '.join(added)}] -[{', '.join(removed)}] -> {len(hosts)} workers")
    if removed:
        checkpoint_for(args, trainer, removed)
    acknowledge(args, generation, added, removed)


def checkpoint_for(args, trainer, removed):
    """Checkpoints now when a removed worker goes before the next checkpoint would be written.

    dtd's `notices` file says why workers left and by when (a Spot warning: two minutes). Without
    it (an older dtd, a hook instead of a signal) a removal may be a Spot warning: checkpoint now.
    """
    notices = read_notices(args)
    if notices is None:
        trainer.save(args.checkpoint)
        say(f"checkpoint at step {trainer.global_step} (epoch {trainer.epoch}) after a removal")
        return
    dated = [n for n in notices if n["ip"] in removed and n["deadline"] is not None]
    if not dated:
        say("no deadline for the workers that left: the next checkpoint is at the epoch's end")
        return
    first = min(dated, key=lambda n: n["deadline"])
    left = first["deadline"] - time.time()
    # One step more than the epoch's rest: a step in progress must finish before the save.
    next_in = (args.steps_per_epoch - trainer.step_in_epoch + 1) * args.step_time
    what = f"{first['kind']} of {first['ip']} in {max(left, 0):.0f}s"
    if left <= next_in:
        trainer.save(args.checkpoint)
        say(f"checkpoint at step {trainer.global_step} (epoch {trainer.epoch}) before the deadline: "
            f"{what}, the next checkpoint in {next_in:.1f}s")
    else:
        say(f"deadline: {what}; the next checkpoint, in {next_in:.1f}s, comes first")


NOTICES_LIMIT = 1 << 20  # a notice is about a hundred bytes; more is not dtd's


def read_notices(args):
    """This generation's notices from dtd, each {ip, kind, deadline (epoch seconds or None)};
    None when there is no file, or it is another generation's or unreadable."""
    generation = read_generation(args.generation_file)
    try:
        fd = os.open(args.notices, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                raise ValueError("not a regular file")
            doc = json.loads(f.read(NOTICES_LIMIT + 1)[:NOTICES_LIMIT])
        if doc.get("generation") != generation:
            return None
        return [{"ip": str(n["ip"]), "kind": str(n["kind"]), "deadline": deadline_of(n.get("deadline"))}
                for n in doc["notices"]]
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        warn(f"cannot read {args.notices} ({e}); treating the removal as urgent")
        return None


def deadline_of(text):
    if text is None:
        return None
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def start_membership(args, flags, trainer):
    """Wait for the host file, adopt it, and acknowledge it; False if stopped while waiting."""
    waiting = False
    while True:
        flags["rescale"] = False  # this read already covers any signal sent before it
        exists = os.path.exists(args.hostfile)
        generation, hosts = read_membership(args) if exists else (None, None)
        if hosts is not None:
            break
        if not waiting:
            say(f"waiting for host file {args.hostfile} ...")
        waiting = True
        if flags["stop"]:
            return False
        time.sleep(max(args.step_time, 0.1))
    trainer.set_workers(hosts)
    say(f"start: {len(trainer.workers)} workers {trainer.workers}")
    # The log may already hold a previous run's history: only append what differs from it.
    old = read_log(args.log)[0] if args.ack == "log" else []
    acknowledge(args, generation, *diff(old, trainer.workers))
    return True


def train(args, flags, trainer):
    progress = Progress(args.progress, args.progress_every)
    progress.after_step(trainer.global_step, force=True)  # where a resumed job starts
    train_steps(args, flags, trainer, progress)
    progress.remove()  # not after an error: a job that failed has stalled


def train_steps(args, flags, trainer, progress):
    waiting = False
    while not flags["stop"] and not (args.epochs and trainer.epoch >= args.epochs):
        if flags["rescale"]:
            flags["rescale"] = False  # cleared first: a signal during the re-read re-reads again
            rescale(args, trainer)
        if not trainer.workers:
            if not waiting:
                say("no workers; waiting")
            waiting = True
            time.sleep(args.step_time)
            continue
        waiting = False
        trainer.step()
        time.sleep(args.step_time)  # stands in for the GPU work of a real step
        progress.after_step(trainer.global_step)
        if trainer.step_in_epoch >= args.steps_per_epoch:
            trainer.epoch += 1
            trainer.step_in_epoch = 0
            loss = trainer.save(args.checkpoint)
            progress.checkpointed(trainer.global_step)
            say(f"epoch {trainer.epoch} loss {loss:.6f} "
                f"workers {len(trainer.workers)} {trainer.workers}")


class Parser(argparse.ArgumentParser):
    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


def number(kind, minimum):
    def convert(text):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if not math.isfinite(value):  # nan/inf: a traceback in time.sleep, or a NaN model
            raise argparse.ArgumentTypeError(f"not a finite number: {text!r}")
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}: {text!r}")
        return value
    return convert


# (option, file name under --shared-dir, help)
PATHS = [("hostfile", "host_worker", "host file to train on"),
         ("pidfile", "job.pid", "where our PID is written for the daemon's signal"),
         ("log", "host_worker_log", "2018 acknowledgement log, for --ack log"),
         ("ack-file", "ack", "acknowledged generation, for --ack file"),
         ("generation-file", "generation", "generation written by the daemon, for --ack file"),
         ("checkpoint", "checkpoint.json", "checkpoint written at every epoch end"),
         ("notices", "notices", "dtd's notices of the generation it signalled: why workers left, by when"),
         ("progress", "progress", "the step reached, for dtd's stall detection (job.stall)")]


def parse_args(argv):
    p = Parser(description=__doc__.splitlines()[0])
    p.add_argument("--shared-dir", required=True, metavar="DIR",
                   help="shared directory (EFS) the daemon uses")
    for option, name, text in PATHS:
        p.add_argument(f"--{option}", metavar="PATH", help=f"{text} (default DIR/{name})")
    p.add_argument("--ack", choices=("log", "file", "none"), default="log",
                   help="how to acknowledge a membership (default log)")
    p.add_argument("--epochs", type=number(int, 0), default=0, metavar="N",
                   help="epochs to train in total; 0 = until SIGTERM/SIGINT (default 0)")
    p.add_argument("--steps-per-epoch", type=number(int, 1), default=20, metavar="N",
                   help="steps per epoch (default 20)")
    p.add_argument("--step-time", type=number(float, 0), default=0.1, metavar="SECONDS",
                   help="sleep per step, standing in for GPU work (default 0.1)")
    p.add_argument("--samples", type=number(int, 1), default=2048, metavar="N",
                   help="dataset size (default 2048)")
    p.add_argument("--features", type=number(int, 1), default=8, metavar="N",
                   help="features per sample (default 8)")
    p.add_argument("--progress-every", type=number(float, 0), default=1.0, metavar="SECONDS",
                   help="write the progress file at most this often (default 1)")
    p.add_argument("--lr", type=number(float, 0), default=0.05, help="learning rate (default 0.05)")
    p.add_argument("--seed", type=int, default=0, help="seed of the synthetic data (default 0)")
    args = p.parse_args(argv)
    if not os.path.isdir(args.shared_dir):
        p.error(f"--shared-dir {args.shared_dir} is not a directory")
    for option, name, _ in PATHS:
        key = option.replace("-", "_")
        path = getattr(args, key) or os.path.join(args.shared_dir, name)
        if not os.path.isdir(os.path.dirname(os.path.abspath(path))):
            p.error(f"--{option} {path}: its directory does not exist")
        setattr(args, key, path)
    return args


def remove_pidfile(path):
    # Only our own: a newer job may already have replaced it.
    with contextlib.suppress(OSError):
        with open(path, encoding="utf-8") as f:
            if f.read().strip() == str(os.getpid()):
                os.unlink(path)


def main(argv=None):
    args = parse_args(argv)
    flags = {"rescale": False, "stop": False}
    signal.signal(signal.SIGUSR1, lambda *_: flags.__setitem__("rescale", True))
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: flags.__setitem__("stop", True))
    try:
        trainer = Trainer(args)
        trainer.load(args.checkpoint)
        atomic_write(args.pidfile, f"{os.getpid()}\n".encode())
        if start_membership(args, flags, trainer):
            train(args, flags, trainer)
            trainer.save(args.checkpoint)
            say(f"stopped at epoch {trainer.epoch} step {trainer.global_step}")
        return 0
    except UsageError as e:
        print(f"{PREFIX} error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"{PREFIX} error: {e}", file=sys.stderr)
        return 1
    finally:
        remove_pidfile(args.pidfile)


if __name__ == "__main__":
    sys.exit(main())
