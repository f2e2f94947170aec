"""dt_torch: what a PyTorch script started by `dtd agent`'s launcher (torchrun) needs from
dynamic-training. Standard library, torch and dt_atomic.py (which writes its files) only; shipped
in the release next to `dtd`, with dt_atomic.py beside it (in the repository: prepare-data/).

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

To let `dtd` find a straggler (`job.stragglers`), time the part of a step a node does alone,
before it waits on the others (the forward pass and the loss; not the backward pass, which waits
in the gradients' allreduce):

        with session.compute(step):
            loss = loss_fn(model(x), y)

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

Under the `in_place` strategy no membership change restarts a process: each node is one torchft
replica group, and `Session.in_place()` wraps the model and optimizer (docs/torchrun.md, "The in-place
strategy"):

    session = dt_torch.Session()
    ft = session.in_place(model, optimizer, global_batch=64)   # was: DDP(model)
    while ft.step < steps:
        ft.begin()                                 # was: optimizer.zero_grad(); the quorum
        idx = ft.shard()                           # this node's positions in the step's batch
        loss = loss_fn(ft.model(x[idx]), y[idx], reduction="sum") * ft.loss_scale
        loss.backward()
        if ft.commit():                            # was: optimizer.step(); False: step discarded
            session.progress(ft.step)
        if session.should_stop():                  # this node leaves; the others train on
            break
"""
import contextlib
import ipaddress
import json
import os
import pickle
import signal
import threading
import time
import urllib.request
from datetime import timedelta
from urllib.parse import urlsplit

import torch
import torch.distributed as dist

from dt_atomic import atomic_write

__all__ = ["Session", "InPlace"]


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
        # This start of the process, in the progress file's `run`: dtd tells a restart by it
        # even when the new run passes the old one's step before dtd reads a lower one.
        self._run = {"id": f"{self.generation}.{os.getpid()}.{time.time_ns()}", "from": None}
        self._checkpoint_step = None
        self._stopping = threading.Event()
        self._in_place = None
        self._step_times = env.get("DT_STEP_TIMES")
        self._computed = []
        self._computed_at = 0.0
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
        """The job-wide rank: under `in_place`, the node's place in the quorum times its
        processes, plus the local rank (rank 0 writes the job's files)."""
        if self._in_place is not None:
            return self._in_place.global_rank()
        return dist.get_rank() if dist.is_initialized() else int(os.environ.get("RANK", "0"))

    def in_place(self, model, optimizer, global_batch, **kw):
        """The `in_place` strategy's wrapper (see `InPlace`); needs torchft."""
        self._in_place = InPlace(self, model, optimizer, global_batch, **kw)
        return self._in_place

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
        if self.peer_lost and self._in_place is None:
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
        atomic_write(self.ack_file, f"{self.generation}\n".encode())
        return True

    def progress(self, step, force=False, **extra):
        """Rank 0 writes `{"step", "time", "generation", "world_size", "run", ...}` to the
        progress file at most once a second (dtd reads `step`, `run` and `checkpoint_step`; other
        keys are for people). `run.from`, the step this process started from, is the first step
        it was given less one: call it first with the step after the checkpoint it loaded. No
        `run` under `in_place`."""
        if self._run["from"] is None:
            self._run["from"] = max(int(step) - 1, 0)
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
        if self._in_place is not None:
            # No run: the nodes never restart together, and rank 0 moves from node to node with
            # the quorum, each a process of its own start (dtd would take that for a restart).
            body.update(self._in_place.view())
        else:
            body["run"] = self._run
        if self._checkpoint_step is not None:
            body["checkpoint_step"] = self._checkpoint_step
        body.update(extra)
        atomic_write(self.progress_file, (json.dumps(body) + "\n").encode(), durable=False)

    @contextlib.contextmanager
    def compute(self, step):
        """Times the block: this process's own work in step `step`. At most once a second each
        process writes the median of its last 10 such times to a file of its own in the agent's
        `DT_STEP_TIMES` directory; the agent reports the node's slowest to dtd, which compares
        the nodes (`job.stragglers`). Does nothing outside `dtd agent`."""
        began = time.perf_counter()
        try:
            yield
        finally:
            if self._step_times:
                self._computed = (self._computed + [time.perf_counter() - began])[-10:]
                self._say_compute(step)

    def _say_compute(self, step):
        now = time.monotonic()
        if now - self._computed_at < 1.0:
            return
        self._computed_at = now
        times = sorted(self._computed)
        body = {"step": int(step), "compute_s": times[len(times) // 2]}
        path = os.path.join(self._step_times, str(os.getpid()))
        try:
            atomic_write(path, (json.dumps(body) + "\n").encode(), durable=False)
        except OSError as e:
            print(f"[dt_torch] cannot write the step time to {path}: {e}", flush=True)
            self._step_times = None

    def checkpointed(self, step):
        """Rank 0, after a checkpoint was saved at `step`: says so in the progress file at once,
        where dtd's `join.at_checkpoint` waits for it to add ready workers."""
        self._checkpoint_step = int(step)
        self.progress(step, force=True)

    def should_stop(self):
        """True on every rank at the same step once any rank's node was asked to stop, or when a
        peer is gone (the collective fails): then checkpoint and leave. Under `in_place` only
        this node's ranks agree (the others train on without it), and a lost peer is torchft's
        business: the step is discarded and the quorum re-forms."""
        if self._in_place is not None and not (dist.is_initialized() and dist.get_world_size() > 1):
            if self.stop_requested:
                self._stopping.set()
                self._in_place.leave()
            return self.stop_requested
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
            if self._in_place is not None:
                self._in_place.leave()
        return stop

    def notices(self):
        """The notices dtd wrote for this generation (`[{"ip", "kind", "deadline"}]`), if any:
        why workers left and by when (docs/job-contract.md, "The job contract"). dtd writes them with
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


class InPlace:
    """The `in_place` strategy: this node is one torchft replica group, and a membership change
    re-forms the process group between two steps instead of restarting anything.

    What torchft does (`torchft.Manager`): a quorum per step from the Lighthouse `dtd` runs (the
    agent sets `TORCHFT_LIGHTHOUSE`), the process group re-formed when the quorum changes, a
    step whose allreduce failed discarded on every replica (`commit()` returns False and the
    same step runs again), and a node that joins or fell behind copies the model and optimizer
    from a live peer (HTTP, no checkpoint read). What this adds: the node's own ranks averaged
    first (so `nproc_per_node` may be more than one), a comm hook that hands the bucket back on a
    failed allreduce (torchft 0.2.0's asserts, and crashes the survivors), the step's batch split
    by the quorum, the acknowledgement once the quorum is the launch plan's nodes, a clean
    leave at a step boundary, and the quorum's changes in the progress file for `dtctl status`.

    global_batch: samples per step for the whole job, whatever the number of nodes: `shard()`
    gives this node (and this local rank) its part, `loss_scale` makes a summed loss the global
    batch's mean after torchft's average, so a step means the same in any world.
    state_dict / load_state_dict: more state to hand to a joining node (a scheduler, a data
    position), beside the model's and the optimizer's. A joining node loads what a peer sends
    with torch.load's `weights_only` (tensors, numbers, strings, and lists, tuples and dicts of
    them): register any other type with `torch.serialization.add_safe_globals`.
    """

    CHANGES_KEPT = 16

    def __init__(self, session, model, optimizer, global_batch, state_dict=None, load_state_dict=None):
        import torchft  # only this strategy needs it (requirements-torch.txt pins it)

        env = os.environ
        if not env.get("TORCHFT_LIGHTHOUSE"):
            raise RuntimeError("dt_torch.InPlace: TORCHFT_LIGHTHOUSE is not set: run it under "
                               "`dtd agent` with job.launcher.strategy: in_place")
        if int(global_batch) < 1:
            raise ValueError("dt_torch.InPlace: global_batch must be positive")
        self.session = session
        self.global_batch = int(global_batch)
        self.optimizer = optimizer
        self.ip = env.get("DT_IP", "127.0.0.1")
        self.local_rank = int(env.get("LOCAL_RANK", "0"))
        self.local_world = int(env.get("LOCAL_WORLD_SIZE", "1"))
        cuda = torch.cuda.is_available()
        if self.local_world > 1 and not dist.is_initialized():
            dist.init_process_group("nccl" if cuda else "gloo")  # this node's ranks only
        self._more_state = (state_dict, load_state_dict)
        self._model = model
        timeout = timedelta(seconds=float(env.get("DT_COLLECTIVE_TIMEOUT", "10")))
        pg = torchft.ProcessGroupNCCL(timeout=timeout) if cuda else torchft.ProcessGroupGloo(timeout=timeout)
        self.manager = torchft.Manager(
            pg=pg,
            min_replica_size=int(env.get("DT_MIN_NODES", "1")),
            load_state_dict=self._load,
            state_dict=self._save,
            replica_id=_replica_id(self.ip),
            hostname=self.ip,
            timeout=timeout,
            connect_timeout=timeout,
            checkpoint_transport=_transport(timeout, self.ip, self._recovery_source),
        )
        self._quorums = _Quorums(self.manager._client)
        self.manager._client = self._quorums  # torchft keeps the quorum's members to itself
        self.model = _ddp(torchft, self.manager, model)
        self._plan = _PlanReader(session.plan_file)
        self._acked = None
        self._quorum_id = None
        self._members = []
        self._changed = None  # (when, quorum id, members before) of a change not yet committed
        self._last_commit = time.monotonic()
        self._failures = 0
        self.changes = []
        self.left = False
        self._ready_at = time.monotonic()
        self._committed = False

    @property
    def step(self):
        """The job's step, the same on every node: a joining node takes it from its peer."""
        return self.manager.current_step()

    def resume(self, step):
        """The step a checkpoint read at start holds (the first node of a job started again);
        a node joining a live quorum takes the peers' step instead."""
        self.manager.load_state_dict({"step": int(step), "batches_committed": 0})

    def begin(self):
        """Before the forward pass: the quorum of this step (where nodes join and leave)."""
        self.manager.start_quorum()
        self.optimizer.zero_grad()
        self.manager.wait_quorum()
        self._follow_quorum()

    def shard(self):
        """This rank's positions in the step's global batch (a range; empty while this node
        copies its state from a peer, which trains from the next step)."""
        rank = self.manager.participating_rank()
        nodes = max(self.manager.num_participants(), 1)
        if rank is None:
            return range(0)
        world = nodes * self.local_world
        me = rank * self.local_world + self.local_rank
        return range(self.global_batch * me // world, self.global_batch * (me + 1) // world)

    @property
    def loss_scale(self):
        """Multiplies a loss summed over this rank's samples so that, after the average over the
        node's ranks and then over the nodes, the gradient is the global batch's mean."""
        return max(self.manager.num_participants(), 1) * self.local_world / self.global_batch

    def commit(self):
        """After the backward pass: steps the optimizer when every node's gradients arrived.
        False: the step is discarded on every node (a peer vanished mid-step) and runs again."""
        ok = self.manager.should_commit()
        if not ok:
            self._failures += 1
            return False
        self.optimizer.step()
        now = time.monotonic()
        if not self._committed:
            self._committed = True
            print(f"[dt_torch] node {self.ip}: first step committed {now - self._ready_at:.2f}s "
                  f"after it was ready, at step {self.step}", flush=True)
        if self._changed is not None:
            self._note_change(now)
        self._last_commit = now
        self._failures = 0
        self._acknowledge()
        return True

    def leave(self):
        """This node stops at a step boundary: its manager stops heartbeating, so the next quorum
        forms without it after the Lighthouse's join timeout."""
        if not self.left:
            self.left = True
            self.manager.shutdown(wait=False)

    def global_rank(self):
        rank = self.manager.participating_rank() if self.manager._quorum_future else None
        return 1 if rank is None else rank * self.local_world + self.local_rank

    def view(self):
        """What the progress file says of the quorum (dtd shows and journals it)."""
        return {
            "world_size": max(self.manager.num_participants(), 1) * self.local_world,
            "in_place": {"quorum": self._quorum_id, "nodes": len(self._members),
                         "changes": self.changes[-self.CHANGES_KEPT:]},
        }

    def _recovery_source(self):
        """The manager this node copies its state from in the current quorum, as it named it."""
        q = getattr(getattr(self, "_quorums", None), "last", None)
        return getattr(q, "recover_src_manager_address", "") or ""

    def _follow_quorum(self):
        q = self._quorums.last
        if q is None or q.quorum_id == self._quorum_id:
            return
        members = sorted({_ip_of(r) for r in q.replica_ids})
        if self._quorum_id is not None and self._changed is None:
            self._changed = (time.time(), self._members)
        self._quorum_id, self._members = q.quorum_id, members

    def _note_change(self, now):
        when, before = self._changed
        self._changed = None
        self.changes.append({
            "quorum": self._quorum_id,
            "step": self.step,
            "nodes": len(self._members),
            "joined": [ip for ip in self._members if ip not in before][:self.CHANGES_KEPT],
            "left": [ip for ip in before if ip not in self._members][:self.CHANGES_KEPT],
            "lost_steps": self._failures,
            "paused_s": round(now - self._last_commit, 3),
            "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(when)),
        })
        del self.changes[:-self.CHANGES_KEPT]
        if self.global_rank() == 0:
            self.session.progress(self.step, force=True)

    def _acknowledge(self):
        """The writer acknowledges the newest plan once the quorum that just committed is
        exactly its nodes: dtd may then terminate the nodes it let go. That plan's generation
        is then the one it trains on, and the progress file says so (the process started in an
        older one and is never restarted under `in_place`)."""
        if self.global_rank() != 0:
            return
        plan = self._plan.read()
        if plan is None or plan[0] == self._acked or sorted(plan[1]) != self._members:
            return
        if self.session.ack_file:
            atomic_write(self.session.ack_file, f"{plan[0]}\n".encode())
        self._acked = plan[0]
        self.session.generation = plan[0]

    def _save(self):
        more, _ = self._more_state
        body = {"model": self._model.state_dict(), "optimizer": self.optimizer.state_dict()}
        if more is not None:
            body["more"] = more()
        return body

    def _load(self, body):
        self._model.load_state_dict(body["model"])
        self.optimizer.load_state_dict(body["optimizer"])
        _, load_more = self._more_state
        if load_more is not None and "more" in body:
            load_more(body["more"])


def _replica_id(ip):
    """torchft appends `:<uuid>` and reads the trailing digits as a number (a debug label):
    the low 24 bits of the address keep them distinct within a VPC."""
    return f"{ip}#{int(ipaddress.ip_address(ip)) & 0xFFFFFF}"


def _ip_of(replica_id):
    return replica_id.rsplit(":", 1)[0].split("#", 1)[0]


class _Quorums:
    """torchft's manager client, keeping the last quorum it returned (its members, by id)."""

    def __init__(self, client):
        self._client = client
        self.last = None

    def _quorum(self, *args, **kwargs):
        q = self._client._quorum(*args, **kwargs)
        self.last = q
        return q

    def __getattr__(self, name):
        return getattr(self._client, name)


class _PlanReader:
    """The launch plan's generation and hosts, read again only when the file changed."""

    def __init__(self, path):
        self.path = path
        self._seen = None
        self._plan = None

    def read(self):
        if not self.path:
            return None
        try:
            st = os.stat(self.path)
            if (st.st_ino, st.st_mtime_ns) != self._seen:
                with open(self.path, encoding="utf-8") as f:
                    body = json.load(f)
                self._plan = (int(body["generation"]), [str(h) for h in body["hosts"]])
                self._seen = (st.st_ino, st.st_mtime_ns)
        except (OSError, ValueError, KeyError, TypeError):
            return self._plan
        return self._plan


def _transport(timeout, ip, source):
    """torchft's HTTP transport, advertising this node's address (torchft uses the host name,
    which on a host of several loopback "nodes" names none of them). What a peer sends is
    untrusted: torchft 0.2.0 unpickles it whole (`weights_only=False`), so a peer that claims the
    highest step would run code here. This one loads tensors and plain values only, and only
    from the host of the manager the quorum named as the source (`source()`)."""
    from torchft.checkpointing import HTTPTransport

    class Transport(HTTPTransport):
        def address(self):
            port = self._server.socket.getsockname()[1]
            return f"http://{ip}:{port}/checkpoint/"

        def recv_checkpoint(self, src_rank, metadata, step, timeout):
            _check_source(metadata, source())
            return super().recv_checkpoint(src_rank, metadata, step, timeout)

        @classmethod
        def _load_from_address(cls, address, timeout):
            return _load_state(address, timeout)

    return Transport(timeout=timeout, num_chunks=0)


def _check_source(url, manager):
    """A checkpoint URL is `http://<host>:<port>/checkpoint/` on the source manager's host."""
    got, want = urlsplit(url), urlsplit(manager)
    plain = got.scheme == "http" and got.path == "/checkpoint/" and not (
        got.query or got.fragment or got.username or got.password)
    if not plain or not want.hostname or got.hostname != want.hostname:
        raise ValueError(f"dt_torch: refused the recovery source's checkpoint address {url!r}: "
                         f"not http://<host>:<port>/checkpoint/ on {want.hostname or manager!r}, "
                         "the host the quorum names")


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """The state comes from the host checked, not from wherever it points."""

    def redirect_request(self, *_args, **_kwargs):
        return None


def _load_state(address, timeout):
    from torch.distributed._serialization import _streaming_load

    opener = urllib.request.build_opener(_NoRedirect)
    with opener.open(address, timeout=timeout.total_seconds()) as f:
        try:
            return _streaming_load(f, weights_only=True)
        except pickle.UnpicklingError as e:
            raise RuntimeError(f"dt_torch: refused the state from {address}: it holds more than "
                               f"tensors and plain values (torch.load weights_only): {e}") from e


def _ddp(torchft, manager, model):
    """torchft's DDP with a hook that averages over this node's ranks first, then over the
    nodes, and hands the bucket back when the nodes' allreduce failed (the manager then refuses
    the commit everywhere): torchft 0.2.0's own hook asserts and kills the survivors."""

    def hook(state, bucket):
        buf = bucket.buffer()
        if dist.is_initialized() and dist.get_world_size() > 1:
            dist.all_reduce(buf)
            buf.div_(dist.get_world_size())
        work = state.allreduce(buf)
        work.wait()
        inner = getattr(work.get_future(), "_fut", None)
        if inner is None:
            done = torch.futures.Future()
            done.set_result(buf)
            return done
        return inner

    class DDP(torchft.DistributedDataParallel):
        _comm_hook = staticmethod(hook)

    return DDP(manager, model)
