"""dt_torch: what a PyTorch script started by `dtd agent`'s launcher (torchrun) needs from
dynamic-training. Standard library and torch only; shipped in the release next to `dtd`.

    import dt_torch
    session = dt_torch.Session()             # reads the agent's DT_* variables, traps the stop signal
    torch.distributed.init_process_group("gloo")   # or "nccl"
    session.joined()                         # rank 0 acknowledges this generation once the world is whole
    for step in range(start, steps):
        ...one training step...
        session.progress(step)               # rank 0, at most once a second
        if step % every == 0:
            save_checkpoint(); session.checkpointed(step)   # said at once (join.at_checkpoint)
        if session.should_stop():            # every rank agrees (one tiny allreduce)
            save_checkpoint()                # rank 0; then leave: the launcher starts the next world
            sys.exit(session.exit_code())
    session.finished()                       # rank 0, after the last step: the job is done

Every membership change starts a new generation. Under the `generation` strategy the agent stops
torchrun (SIGTERM by default, `job.launcher.stop`) and starts it again with the new world; under
`elastic` torchrun stays, and its workers get the signal (from torchrun when a node joins, from
the agent when one left) and must exit non-zero (`exit_code()`) so torchrun starts a new round
instead of taking the job for finished. `should_stop()` turns that signal
into a step boundary that every rank reaches together, so rank 0's checkpoint holds the last
completed step and nothing more is lost than the steps since it.

A rank blocked in a collective whose peer vanished never reaches that boundary (gloo waits 30
minutes, NCCL 10). So the stop signal also starts a watchdog: a rank that has not reached
`should_stop()` within `stop_timeout` seconds of it exits at once, and the next world resumes
from the last periodic checkpoint. Keep `stop_timeout` above your longest step and below
`job.launcher.stop.grace`.
"""
import json
import os
import signal
import tempfile
import threading
import time

import torch
import torch.distributed as dist

__all__ = ["Session"]


class Session:
    """One generation's run of the training script under `dtd agent`."""

    def __init__(self, stop_signals=(signal.SIGTERM, signal.SIGINT), stop_timeout=10.0):
        env = os.environ
        self.generation = int(env.get("DT_GENERATION", "0"))
        self.nnodes = int(env.get("DT_NNODES", "1"))
        self.strategy = env.get("DT_STRATEGY", "generation")
        self.plan_file = env.get("DT_LAUNCH_PLAN")
        self.ack_file = env.get("DT_ACK_FILE")
        self.progress_file = env.get("DT_PROGRESS_FILE")
        self.notices_file = env.get("DT_NOTICES_FILE")
        self.stop_requested = False
        self.peer_lost = False
        self.stop_timeout = stop_timeout
        self._progress_at = 0.0
        self._checkpoint_step = None
        self._stopping = threading.Event()
        for s in stop_signals:
            signal.signal(s, self._on_stop)
        self._watch_stop_signals(set(stop_signals))

    def _on_stop(self, signum, _frame):
        self.stop_requested = True

    def _watch_stop_signals(self, signals):
        """Python runs signal handlers only between bytecodes, never inside a blocked collective;
        the wakeup fd is written by the C-level handler at once, so a thread sees the signal."""
        read_end, write_end = os.pipe()
        os.set_blocking(write_end, False)
        signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)

        def watch():
            while True:
                got = os.read(read_end, 64)
                if any(b in signals for b in got):
                    break
            if not self._stopping.wait(self.stop_timeout):
                print(f"[dt_torch] rank {self.rank}: no step boundary {self.stop_timeout}s after "
                      "the stop signal (a collective waits for a peer that is gone): exiting",
                      flush=True)
                os._exit(143)

        threading.Thread(target=watch, name="dt_torch-stop", daemon=True).start()

    @property
    def rank(self):
        return dist.get_rank() if dist.is_initialized() else int(os.environ.get("RANK", "0"))

    def expected_world_size(self):
        """Every node of the launch plan, each with its local processes."""
        return self.nnodes * int(os.environ.get("LOCAL_WORLD_SIZE", "1"))

    def _follow_plan(self):
        """Under `elastic`, torchrun restarts the workers for every new round with the
        environment it started with, so the generation and its size come from the plan itself."""
        if self.strategy != "elastic" or not self.plan_file:
            return
        try:
            with open(self.plan_file, encoding="utf-8") as f:
                plan = json.load(f)
            generation, hosts = int(plan["generation"]), plan["hosts"]
        except (OSError, ValueError, KeyError, TypeError):
            return
        if isinstance(hosts, list) and hosts and generation >= 0:
            self.generation, self.nnodes = generation, len(hosts)

    def exit_code(self):
        """How a rank that stopped at a step boundary exits: 0 under `generation` (the agent is
        stopping torchrun anyway); under `elastic` 75 (EX_TEMPFAIL), since torchrun takes
        workers that all exit 0 for a finished job and would close the rendezvous. A rank whose
        peer is gone exits 1 either way."""
        if self.peer_lost:
            return 1
        return 75 if self.strategy == "elastic" else 0

    def joined(self):
        """Rank 0 acknowledges the generation it trains on, once the world is as large as the
        launch plan says: dtd then lets leaving workers go. Returns whether it acknowledged."""
        self._follow_plan()
        if self.rank != 0 or not self.ack_file:
            return False
        if dist.get_world_size() != self.expected_world_size():
            return False
        _write_atomic(self.ack_file, f"{self.generation}\n")
        return True

    def progress(self, step, force=False, **extra):
        """Rank 0 writes `{"step", "time", "generation", "world_size", ...}` to the progress file
        at most once a second (dtd's `job.stall` reads `step`; other keys are for people)."""
        if self.rank != 0 or not self.progress_file:
            return
        now = time.time()
        if not force and now - self._progress_at < 1.0:
            return
        self._progress_at = now
        body = {
            "step": int(step),
            "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)),
            "generation": self.generation,
            "world_size": dist.get_world_size() if dist.is_initialized() else 1,
        }
        if self._checkpoint_step is not None:
            body["checkpoint_step"] = self._checkpoint_step
        body.update(extra)
        _write_atomic(self.progress_file, json.dumps(body) + "\n", durable=False)

    def checkpointed(self, step):
        """Rank 0, after a checkpoint was saved at `step`: says so in the progress file at once,
        where dtd's `join.at_checkpoint` waits for it to add ready workers."""
        self._checkpoint_step = int(step)
        self.progress(step, force=True)

    def should_stop(self):
        """True on every rank at the same step once any rank's node was asked to stop, or when a
        peer is gone (the collective fails): then checkpoint and leave."""
        flag = torch.tensor([1.0 if self.stop_requested else 0.0])
        try:
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        except Exception:  # a peer's process is gone: this world cannot go on
            self.peer_lost = True
            self._stopping.set()
            return True
        stop = bool(flag.item() > 0)
        if stop:
            self._stopping.set()
        return stop

    def notices(self):
        """The notices dtd wrote for this generation (`[{"ip", "kind", "deadline"}]`), if any:
        why workers left and by when (README, "The job contract"). dtd writes them with
        `job.notify: { signal }` only; under the launcher the stop signal is the warning."""
        if not self.notices_file:
            return []
        try:
            with open(self.notices_file, encoding="utf-8") as f:
                body = json.load(f)
        except (OSError, ValueError):
            return []
        if not isinstance(body, dict) or body.get("generation") != self.generation:
            return []
        notices = body.get("notices")
        return notices if isinstance(notices, list) else []

    def finished(self):
        """Rank 0, after the last step: removes the progress file, so a finished job is not
        taken for a stalled one."""
        if self.rank == 0 and self.progress_file:
            try:
                os.unlink(self.progress_file)
            except FileNotFoundError:
                pass


def _write_atomic(path, text, durable=True):
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{os.path.basename(path)}.")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fchmod(f.fileno(), 0o644)
            if durable:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
