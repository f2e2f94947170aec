#!/usr/bin/env python3
"""A small, real PyTorch job for the `in_place` strategy (torchft under `dtd agent`, CPU or GPU).

The same regression as `torch_job.py`, written for `dt_torch.InPlace`: each node is a torchft
replica group, a node that joins copies the model and optimizer from a live peer, one that leaves
(or vanishes) costs the others no restart, and every step trains on the same global batch
whatever the number of nodes. The replica at rank 0 acknowledges the plan once the quorum is its
nodes, reports the step, checkpoints every `--checkpoint-every` steps (a job started again from
nothing resumes there), and records the loss on the whole data set every `--eval-every` steps:
at the end it writes that curve to `<dir>/in_place_job_result.json`.

Run under torchrun by the agent (`job.launcher.script: [.../in_place_job.py, --dir, /myEFSvolume]`
with `strategy: in_place`), or alone with `--single` for the curve a run without changes draws.
"""
import argparse
import collections
import json
import os
import statistics
import sys
import time

import torch

try:
    import dt_torch
except ImportError:  # in the repository: templates/job/ and prepare-data/ (dt_atomic) beside examples/
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.realpath(__file__)), "..", "templates", "job"))
    sys.path.insert(1, os.path.join(os.path.dirname(os.path.realpath(__file__)), "..", "prepare-data"))
    import dt_torch

PREFIX = "[in_place_job]"
FEATURES = 16
SAMPLES = 4096


def say(msg):
    print(f"{PREFIX} {msg}", flush=True)


def data(seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(SAMPLES, FEATURES, generator=g)
    w = torch.randn(FEATURES, 1, generator=g)
    y = x @ w + 0.1 * torch.randn(SAMPLES, 1, generator=g)
    return x, y


def batch(step, size, seed):
    """The step's global batch: the same samples whatever the number of nodes."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + step)
    return torch.randint(0, SAMPLES, (size,), generator=g)


def full_loss(model, x, y):
    with torch.no_grad():
        return torch.nn.functional.mse_loss(model(x), y).item()


def save(path, step, model, opt):
    tmp = f"{path}.tmp{os.getpid()}"
    torch.save({"step": step, "model": model.state_dict(), "opt": opt.state_dict()}, tmp)
    os.replace(tmp, path)


def load(path, model, opt):
    if not os.path.exists(path):
        return 0
    ckpt = torch.load(path, weights_only=True)
    model.load_state_dict(ckpt["model"])
    opt.load_state_dict(ckpt["opt"])
    return int(ckpt["step"])


def single(args):
    """One process, no torchft: the curve of a run without membership changes."""
    torch.manual_seed(args.seed)
    model = torch.nn.Linear(FEATURES, 1)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    x, y = data(args.seed)
    curve = {}
    for step in range(args.steps):
        idx = batch(step, args.batch, args.seed)
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x[idx]), y[idx]).backward()
        opt.step()
        if (step + 1) % args.eval_every == 0:
            curve[step + 1] = full_loss(model, x, y)
    return {"steps": args.steps, "loss": full_loss(model, x, y), "curve": curve}


class Trained:
    """This node's own count of the seconds it trained a step the quorum kept
    (`--count-trained`): each committed step counts the node's pace, the median of its last
    `PACE_OF` intervals from one committed step to the next, so that a step whose interval
    held a wait for a new quorum counts what the node's steps take, not the wait (a step that
    did not commit, and the wait before a node's first, count nothing). Written to
    DIR/<node>.json once a second, from where a restarted process left it."""

    PACE_OF = 15

    def __init__(self, directory, node):
        self.path = os.path.join(directory, f"{node}.json") if directory else None
        self.node_s, self.last, self.written = 0.0, None, 0.0
        self.intervals = collections.deque(maxlen=self.PACE_OF)
        if directory:
            os.makedirs(directory, exist_ok=True)
        if self.path and os.path.exists(self.path):
            with open(self.path) as f:
                self.node_s = float(json.load(f).get("node_seconds", 0.0))

    def step(self, committed, step):
        now = time.monotonic()
        if committed and self.last is not None:
            self.intervals.append(now - self.last)
            self.node_s += statistics.median(self.intervals)
        self.last = now if committed else None
        if self.path and now - self.written >= 1.0:
            self.written = now
            _write_json(self.path, {"node_seconds": round(self.node_s, 3), "step": step})


def in_place(args):
    session = dt_torch.Session(stop_timeout=args.stop_timeout)
    torch.manual_seed(args.seed)
    model = torch.nn.Linear(FEATURES, 1)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    ckpt_path = os.path.join(args.dir, "in_place_job_checkpoint.pt")
    curve_path = os.path.join(args.dir, "in_place_job_curve.json")
    start = load(ckpt_path, model, opt)
    ft = session.in_place(model, opt, global_batch=args.batch)
    if start:
        ft.resume(start)
    x, y = data(args.seed)
    say(f"node {ft.ip} (pid {os.getpid()}) starts; checkpoint at step {start}")
    # Each node's first process counts the node's (every process of a node trains the same steps).
    local_first = os.environ.get("LOCAL_RANK", "0") == "0"
    trained = Trained(args.count_trained if local_first else "", ft.ip)
    while ft.step < args.steps:
        ft.begin()
        step = ft.step
        idx = batch(step, args.batch, args.seed)[list(ft.shard())]
        with session.compute(step):  # this node's own work: dtd compares the nodes' (stragglers)
            loss = torch.nn.functional.mse_loss(ft.model(x[idx]), y[idx], reduction="sum") * ft.loss_scale
            _load(args.compute_load)
        loss.backward()
        committed = ft.commit()
        if committed:
            writer = session.rank == 0
            if writer and ft.step % args.eval_every == 0:
                curve = _read_curve(curve_path)  # an earlier writer's points too
                curve[ft.step] = full_loss(model, x, y)
                _write_json(curve_path, curve)
            if writer and ft.step % args.checkpoint_every == 0:
                save(ckpt_path, ft.step, model, opt)
                session.checkpointed(ft.step)
            session.progress(ft.step, pid=os.getpid())
        if args.step_sleep:
            time.sleep(args.step_sleep)
        trained.step(committed, ft.step)
        if session.should_stop():
            say(f"node {ft.ip}: leaving at step {ft.step}; the others train on")
            return session.exit_code()
    if session.rank == 0:
        result = {"steps": ft.step, "loss": full_loss(model, x, y), "curve": _read_curve(curve_path),
                  "changes": ft.changes, "generation": session.generation}
        _write_json(os.path.join(args.dir, "in_place_job_result.json"), result)
        session.progress(ft.step, force=True)
        session.finished()
        say(f"finished: {ft.step} steps, loss {result['loss']:.6f}")
    ft.leave()
    return 0


def _load(n):
    if n:
        a = torch.ones(n, n)
        (a @ a).sum().item()


def _read_curve(path):
    try:
        with open(path, encoding="utf-8") as f:
            return {int(k): v for k, v in json.load(f).items()}
    except (OSError, ValueError):
        return {}


def _write_json(path, body):
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(body, f)
    os.replace(tmp, path)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dir", default=os.environ.get("DT_SHARED_DIR", "."),
                   help="where the checkpoint, the curve and the result go (default: $DT_SHARED_DIR)")
    p.add_argument("--steps", type=int, default=600)
    p.add_argument("--batch", type=int, default=64, help="the global batch: samples per step for the job")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--checkpoint-every", type=int, default=100)
    p.add_argument("--eval-every", type=int, default=50)
    p.add_argument("--compute-load", type=int, default=0,
                   help="a matrix size: one product of that size per step inside the timed "
                        "block, standing in for a real model's forward pass (a CPU it runs on "
                        "slowly makes the node a straggler)")
    p.add_argument("--step-sleep", type=float, default=0.0, help="seconds per step, to watch it")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--stop-timeout", type=float, default=30.0,
                   help="seconds a rank may take to reach a step boundary after the stop signal")
    p.add_argument("--single", action="store_true", help="one process, no torchft: the baseline curve")
    p.add_argument("--count-trained", metavar="DIR", default="",
                   help="each node writes its own count of trained seconds to DIR/<its IP>.json")
    args = p.parse_args()
    if min(args.steps, args.batch, args.checkpoint_every, args.eval_every) < 1:
        print(f"{PREFIX} error: --steps, --batch, --checkpoint-every and --eval-every must be positive",
              file=sys.stderr)
        return 2
    if args.single:
        _write_json(os.path.join(args.dir, "in_place_job_single.json"), single(args))
        return 0
    return in_place(args)


if __name__ == "__main__":
    sys.exit(main())
