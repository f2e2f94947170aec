#!/usr/bin/env python3
"""A small, real PyTorch elastic job for `dtd agent`'s launcher (torchrun, CPU or GPU: `--device`).

Linear regression by DDP: every rank trains on its share of each batch, gradients are averaged by
torch.distributed, rank 0 checkpoints every `--checkpoint-every` steps (and when the agent stops
the launcher for a new generation) and a new world resumes from the checkpoint. It acknowledges
each generation and reports its step through `dt_torch`. At the end rank 0 writes the loss on the
whole data set to `<dir>/torch_job_result.json`.

Run under torchrun by the agent (`job.launcher.script: [.../torch_job.py, --dir, /myEFSvolume]`),
or alone with `--single` for the baseline the tests compare the elastic run's loss with.
"""
import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist

try:
    import dt_torch
except ImportError:  # in the repository: templates/job/ and prepare-data/ (dt_atomic) beside examples/
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.realpath(__file__)), "..", "templates", "job"))
    sys.path.insert(1, os.path.join(os.path.dirname(os.path.realpath(__file__)), "..", "prepare-data"))
    import dt_torch
from dt_atomic import atomic_write  # beside dt_torch.py (which imports it), wherever that is

PREFIX = "[torch_job]"
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


def batch(x, y, step, rank, world, size, seed):
    """The step's batch (the same for every world size), this rank's share of it."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + step)
    idx = torch.randint(0, SAMPLES, (size,), generator=g)
    mine = idx[rank::world]
    return x[mine], y[mine]


def save(path, step, model, opt, trained=0.0):
    tmp = f"{path}.tmp{os.getpid()}"
    torch.save({"step": step, "model": model.state_dict(), "opt": opt.state_dict(),
                "trained_node_s": trained}, tmp)
    os.replace(tmp, path)


def load(path, model, opt, device):
    """The checkpoint's step and the node-seconds trained up to it (0, 0.0 without one)."""
    if not os.path.exists(path):
        return 0, 0.0
    ckpt = torch.load(path, weights_only=True, map_location=device)
    model.load_state_dict(ckpt["model"])
    opt.load_state_dict(ckpt["opt"])
    return int(ckpt["step"]), float(ckpt.get("trained_node_s", 0.0))


class Trained:
    """The job's own count of the node-seconds that trained a step it kept (`--count-trained`):
    each step's time since the one before (a process's first step: since its loop began, see
    `begin`), times the world. Kept in the checkpoint, so the steps a restart trains again are
    counted once. Rank 0 writes it to DIR/job.json once a second."""

    def __init__(self, path, node_s):
        self.path, self.node_s, self.last, self.written = path, node_s, None, 0.0
        if path:
            os.makedirs(os.path.dirname(path), exist_ok=True)

    def begin(self):
        """The training loop starts: a restarted process's first step trains from here (its
        time to this point, the process group and the checkpoint, does not count)."""
        self.last = time.monotonic()

    def step(self, world, step):
        now = time.monotonic()
        if self.last is not None:
            self.node_s += world * (now - self.last)
        self.last = now
        if self.path and now - self.written >= 1.0:
            self.write(step)

    def write(self, step):
        self.written = time.monotonic()
        body = json.dumps({"node_seconds": round(self.node_s, 3), "step": step})
        atomic_write(self.path, body.encode(), durable=False)


def device_of(args):
    """`cuda`: each process on its node's GPU of its local rank, NCCL between them."""
    if args.device == "cpu":
        return torch.device("cpu")
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    return torch.device("cuda", local)


def train(args):
    single = args.single
    session = None if single else dt_torch.Session(stop_timeout=args.stop_timeout)
    device = device_of(args)
    if not single:
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    rank = 0 if single else dist.get_rank()
    world = 1 if single else dist.get_world_size()
    torch.manual_seed(args.seed)
    base = torch.nn.Linear(FEATURES, 1).to(device)
    ids = [device.index] if device.type == "cuda" else None
    model = base if single else torch.nn.parallel.DistributedDataParallel(base, device_ids=ids)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    ckpt_path = os.path.join(args.dir, "torch_job_checkpoint.pt")
    start, trained_node_s = (0, 0.0) if single else load(ckpt_path, base, opt, device)
    writes = args.count_trained and rank == 0
    trained = Trained(os.path.join(args.count_trained, "job.json") if writes else None, trained_node_s)
    x, y = (t.to(device) for t in data(args.seed))
    if session is not None:
        acked = session.joined()
        say(f"generation {session.generation}: rank {rank} of {world}, from step {start}"
            + (" (acknowledged)" if acked else ""))
    step = start
    trained.begin()
    while step < args.steps:
        bx, by = batch(x, y, step, rank, world, args.batch, args.seed)
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(bx), by)
        # DDP averages over ranks; scale so a step means the same whatever the world size.
        (loss * bx.shape[0] * world / args.batch).backward()
        opt.step()
        step += 1
        if args.step_sleep:
            time.sleep(args.step_sleep)
        trained.step(world, step)
        if session is not None:
            session.progress(step, loss=round(loss.item(), 6))
            stop = session.should_stop()
        else:
            stop = False
        if rank == 0 and not single and (step % args.checkpoint_every == 0 or stop) and not (stop and session.peer_lost):
            save(ckpt_path, step, base, opt, trained.node_s)
        if stop:
            why = "a peer is gone" if session.peer_lost else "asked to stop"
            say(f"rank {rank}: stopping at step {step} ({why}); checkpoint at step {step if rank == 0 and not session.peer_lost else 'earlier'}")
            return session.exit_code()
    if rank == 0:
        with torch.no_grad():
            final = torch.nn.functional.mse_loss(base(x), y).item()
        result = {"loss": final, "steps": step, "world_size": world}
        if not single:
            save(ckpt_path, step, base, opt, trained.node_s)
            result["generation"] = session.generation
            session.progress(step, force=True)
            session.finished()
        with open(os.path.join(args.dir, "torch_job_result.json" if not single else "torch_job_single.json"), "w") as f:
            json.dump(result, f)
        say(f"finished: {step} steps, loss {final:.6f}")
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dir", default=os.environ.get("DT_SHARED_DIR", "."),
                   help="where the checkpoint and the result go (default: $DT_SHARED_DIR)")
    p.add_argument("--steps", type=int, default=600)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--checkpoint-every", type=int, default=20)
    p.add_argument("--step-sleep", type=float, default=0.0, help="seconds per step, to watch it")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--stop-timeout", type=float, default=10.0,
                   help="seconds a rank may take to reach a step boundary after the stop signal")
    p.add_argument("--single", action="store_true", help="one process, no torchrun: the baseline")
    p.add_argument("--count-trained", metavar="DIR", default="",
                   help="rank 0 writes the job's own count of trained node-seconds to DIR/job.json")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                   help="cuda: each process on the GPU of its local rank, NCCL between them")
    args = p.parse_args()
    if args.steps < 1 or args.batch < 1 or args.checkpoint_every < 1:
        print(f"{PREFIX} error: --steps, --batch and --checkpoint-every must be positive", file=sys.stderr)
        return 2
    return train(args)


if __name__ == "__main__":
    sys.exit(main())
