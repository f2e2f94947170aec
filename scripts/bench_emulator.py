#!/usr/bin/env python3
"""Benchmarks of the release `dtd` against the emulator (moto on 127.0.0.1), printing figures.

latency: 20 workers, interval 1s. Each trial either deletes a member's elastic tag
  (`delete-tags`) or makes a preparing worker's marker appear, and measures the time until the
  host file is rewritten and until the job (a small process of this script's, via its pidfile) receives SIGUSR1.
interruption: 22 workers, interval 2s (the default), event queue configured. Each trial puts a
  Spot interruption warning for one member into EventBridge (moto delivers it to the SQS queue
  at once) and measures the time until the host file no longer lists it and until the job
  receives SIGUSR1.
memory: 1,000 workers joined; the peak resident set (VmHWM) of `dtd`, and its pass time.
metrics: the memory run again with `metrics.listen` on and /metrics scraped every 100 ms: each
  scrape's time, the peak resident set, and the pass time beside the run without metrics
  (`--only metrics` runs both).
(Issue 10's join, leave and release beside 1,000 other workers, and dtd's AWS calls per minute,
are scripts/bench_hotpath.py, which imports the helpers below: `scripts/bench hotpath`.)

Run it through scripts/bench, which builds the release binaries and sets up the tools.
"""

import argparse
import base64
import contextlib
import http.client
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import boto3
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from free_port import free_port

ELASTIC = "bench-aws-dl-cfn-elastic-worker"
# The dtd of the one build (scripts/build; scripts/env.sh sets DT_BIN_DIR), unless --dtd says.
DTD = os.path.join(os.environ.get("DT_BIN_DIR", "target/release"), "dtd")


def start_moto(workdir):
    port = free_port()
    log = open(os.path.join(workdir, "moto.log"), "w")
    proc = subprocess.Popen(["moto_server", "-H", "127.0.0.1", "-p", str(port)], stdout=log, stderr=log)
    url = f"http://127.0.0.1:{port}"
    for _ in range(100):
        try:
            urllib.request.urlopen(url + "/moto-api/", timeout=1)
            return proc, url
        except OSError:
            time.sleep(0.2)
    proc.kill()
    sys.exit(f"moto_server did not start on {url}; see {workdir}/moto.log")


def client(service, url):
    return boto3.client(service, endpoint_url=url, region_name="us-east-1",
                        aws_access_key_id="bench", aws_secret_access_key="bench")


def ec2_client(url):
    return client("ec2", url)


def make_template(ec2):
    data = {
        "ImageId": "ami-12c6146b",
        "InstanceType": "p3.2xlarge",
        "TagSpecifications": [{"ResourceType": "instance", "Tags": [
            {"Key": "NodeType", "Value": "Worker"}, {"Key": ELASTIC, "Value": "true"}]}],
    }
    ec2.create_launch_template(LaunchTemplateName="bench-worker", LaunchTemplateData=data)


def launch(ec2, count, per_reservation=10):
    out = []
    while count > 0:
        n = min(count, per_reservation)
        r = ec2.run_instances(LaunchTemplate={"LaunchTemplateName": "bench-worker"}, MinCount=n, MaxCount=n)
        out += [(i["InstanceId"], i["PrivateIpAddress"]) for i in r["Instances"]]
        count -= n
    return out


def write_config(workdir, efs, interval, max_workers, api_timeout="10s", queue=None, metrics=None,
                 page_size=None):
    path = os.path.join(workdir, "dtd.yaml")
    page = f"  page_size: {page_size}\n" if page_size else ""
    with open(path, "w") as f:
        f.write(f"""cluster: bench
workers:
  launch_template: bench-worker
  min: 0
  max: {max_workers}
{reports_config()}{page}shared_dir: {efs}
hostfiles:
  - {{ path: {efs}/host_worker, format: mxnet }}
job:
  notify: {{ signal: SIGUSR1, pidfile: {efs}/job.pid }}
  ack: {{ timeout: 10m }}
interval: {interval}
api_timeout: {api_timeout}
allow_local_state_dir: true
""")
        if queue:
            f.write(f"events:\n  queue_url: {queue}\n")
        if metrics:
            f.write(f"metrics: {{ listen: '{metrics}' }}\n")
    return path


def start_dtd(config, url, workdir):
    env = dict(os.environ, AWS_ENDPOINT_URL=url, AWS_ACCESS_KEY_ID="bench",
               AWS_SECRET_ACCESS_KEY="bench", AWS_REGION="us-east-1", RUST_LOG="warn")
    log = open(os.path.join(workdir, "dtd.log"), "w")
    return subprocess.Popen([DTD, "run", "--config", config], env=env, stderr=log)


@contextlib.contextmanager
def emulated_cluster():
    """A temporary shared directory, moto with the worker template, and a slot for dtd; all stopped
    on exit. Yields (workdir, efs, ec2 client, endpoint, procs) where procs["dtd"] may be set."""
    with tempfile.TemporaryDirectory() as workdir:
        efs = os.path.join(workdir, "efs")
        os.mkdir(efs)
        moto, url = start_moto(workdir)
        procs = {}
        try:
            ec2 = ec2_client(url)
            make_template(ec2)
            yield workdir, efs, ec2, url, procs
        finally:
            if "dtd" in procs:
                procs["dtd"].terminate()
                procs["dtd"].wait()
            moto.kill()
            moto.wait()


# Each worker's agent as the benchmarks play it (docs/shared-directory.md, "How a worker's reports
# reach dtd"; src/protocol/channel.rs): a thread per agent with a connection to dtd's port, which
# it makes as soon as dtd listens (and again when it is lost), saying hello with its instance's
# identity document (signed by the tests' stand-in for AWS's key, which the benchmarks' dtd is told
# to trust), then each report as it is put, signed as it is sent, and a ping when it has nothing
# to say.
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
IDENTITY = os.path.join(ROOT, "tests", "fixtures", "identity")
REPORTS_PORT = free_port()
AGENTS = {}


def reports_config():
    """The lines under `workers:` that every benchmark's dtd config has."""
    return (f"  listen: 127.0.0.1:{REPORTS_PORT}\n"
            f"  identity_certificates: {IDENTITY}/signer.pem\n")


def public(key):
    raw = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return base64.b64encode(raw).decode()


def signed(key, name, body):
    """`body` (a JSON object, as bytes) signed for `name`: the envelope dtd agent adds."""
    open_ = body.rstrip()[:-1]
    signed_at = int(time.time() * 1000)
    prefix = open_ + (b"," if not open_.endswith(b"{") else b"")
    prefix += f'"agent_key":"{public(key)}","signed_at":{signed_at}'.encode()
    sig = key.sign(b"dt-agent-report-v1\n" + name.encode() + b"\n" + prefix)
    return prefix + b',"sig":"' + base64.b64encode(sig) + b'"}\n'


def identity(instance_id, ip):
    """The instance identity document EC2 would serve, and its signature (the stand-in's)."""
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import padding
    doc = json.dumps({"accountId": "123456789012", "instanceId": instance_id, "privateIp": ip,
                      "region": "us-east-1"}, indent=2)
    with open(os.path.join(IDENTITY, "signer.pk8"), "rb") as f:
        signer = serialization.load_der_private_key(f.read(), password=None)
    sig = signer.sign(doc.encode(), padding.PKCS1v15(), hashes.SHA256())
    return doc, base64.b64encode(sig).decode()


class PlayedAgent(threading.Thread):
    def __init__(self, instance_id, ip):
        super().__init__(daemon=True)
        self.instance_id, self.ip = instance_id, ip
        self.key = Ed25519PrivateKey.generate()
        self.doc, self.sig = identity(instance_id, ip)
        self.reports, self.versions = {}, 0
        self.cv = threading.Condition()
        self.start()

    def put(self, name, body):
        with self.cv:
            self.versions += 1
            self.reports[name] = (self.versions, body)
            self.cv.notify()

    def run(self):
        # As the real agent (src/agent/channel.rs): 0.1 s after a failed dial, doubling to 5 s.
        # A thousand threads retrying every 0.1 s before dtd listens starve the script itself.
        wait = 0.1
        while True:
            self.proved = False
            try:
                self.session()
            except OSError:
                wait = 0.1 if self.proved else wait
                time.sleep(wait * random.uniform(0.5, 1.0))
                wait = min(wait * 2, 5.0)

    def session(self):
        # From an address of its own, as each worker's agent dials from its instance's IP: dtd
        # holds at most 8 connections not yet proved per address.
        source = ("127." + self.ip.split(".", 1)[1], 0)
        with socket.create_connection(("127.0.0.1", REPORTS_PORT), timeout=30,
                                      source_address=source) as sock:
            answers = sock.makefile("rb")
            hello = json.dumps({"instance_id": self.instance_id, "document": self.doc,
                                "signature": self.sig}).encode()
            self.ask(sock, answers, f"identity_{self.ip}", signed(self.key, f"identity_{self.ip}", hello))
            self.proved = True
            sent = {}
            while True:
                with self.cv:
                    waiting = lambda: [(n, v, b) for n, (v, b) in self.reports.items() if sent.get(n) != v]
                    self.cv.wait_for(lambda: waiting(), timeout=8)
                    todo = waiting()
                if not todo:
                    sock.sendall(b"ping\n")
                    self.answer(answers)
                for name, v, body in todo:
                    self.ask(sock, answers, name, signed(self.key, name, body))
                    sent[name] = v

    def ask(self, sock, answers, name, line):
        sock.sendall(name.encode() + b" " + line)
        self.answer(answers)

    @staticmethod
    def answer(answers):
        line = answers.readline()
        if not line:
            raise OSError("dtd closed the connection")
        if not json.loads(line).get("ok"):
            print(f"dtd refused: {line.decode().strip()}", file=sys.stderr)


def boot(instance_id, ip):
    """The instance's agent starts (it says hello as soon as dtd listens)."""
    agent = AGENTS.get(instance_id)
    if agent is None:
        agent = AGENTS[instance_id] = PlayedAgent(instance_id, ip)
    return agent


def marker(efs, ec2, instance_id, ip):
    """The worker's agent says it prepared its data (its success marker)."""
    body = json.dumps({"instance_id": instance_id, "attempts": 1}).encode()
    boot(instance_id, ip).put(f"prepare_data_success_{ip}", body)


def read_hosts(efs):
    try:
        with open(os.path.join(efs, "host_worker")) as f:
            return f.read().split()
    except FileNotFoundError:
        return []


def wait(what, pred, timeout=120, step=0.002):
    start = time.monotonic()
    while not pred():
        if time.monotonic() - start > timeout:
            sys.exit(f"timed out waiting for {what}")
        time.sleep(step)


JOB = """
import os, signal, sys, time
signal.signal(signal.SIGUSR1, lambda *_: print(time.monotonic(), flush=True))
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(str(os.getpid()))
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
sys.stdin.read()  # until the benchmark ends
"""


class SignalRecorder:
    """The job: a process of its own that writes the pidfile and reports each SIGUSR1's arrival
    (its CLOCK_MONOTONIC, the clock of this script too). Not this script itself: dtd refuses to
    signal one of its own ancestors. It ends when this script does (its stdin closes)."""

    def __init__(self, efs):
        self.times, pidfile = [], os.path.join(efs, "job.pid")
        self.proc = subprocess.Popen([sys.executable, "-c", JOB, pidfile], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        threading.Thread(target=self.read, daemon=True).start()
        wait("the job's pidfile", lambda: os.path.exists(pidfile), timeout=10)

    def read(self):
        for line in self.proc.stdout:
            self.times.append(float(line))

    def after(self, t0):
        return next((t for t in list(self.times) if t >= t0), None)

    def __enter__(self):
        return self

    def __exit__(self, *_):
        self.proc.kill()
        self.proc.wait()


def trial(efs, rec, act, expect):
    start = time.monotonic()
    act()
    wait("the host file", lambda: expect(read_hosts(efs)))
    hosts_at = time.monotonic()
    wait("the signal", lambda: rec.after(start) is not None)
    return hosts_at - start, rec.after(start) - start


def pct(values, p):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def report(name, hostfile, signalled):
    print(f"{name:<28} n={len(signalled):<3} host file: median {statistics.median(hostfile):.3f}s "
          f"p95 {pct(hostfile, 95):.3f}s | job signalled: median {statistics.median(signalled):.3f}s "
          f"p95 {pct(signalled, 95):.3f}s max {max(signalled):.3f}s")


def bench_latency(trials):
    with emulated_cluster() as (workdir, efs, ec2, url, procs):
        members = launch(ec2, 20)
        joiners = launch(ec2, trials)
        for iid, ip in members:
            marker(efs, ec2, iid, ip)
        for iid, ip in joiners:
            boot(iid, ip)  # their agents started, their data not ready yet
        rec = SignalRecorder(efs)
        procs["dtd"] = start_dtd(write_config(workdir, efs, "1s", 200), url, workdir)
        wait("20 workers to join", lambda: len(read_hosts(efs)) == 20, timeout=60)
        time.sleep(1.5)
        results = {"delete-tags -> rescaled": ([], []), "marker -> rescaled": ([], [])}
        for i in range(trials):
            iid, ip = members[i % len(members)]
            h, s = trial(efs, rec, lambda: ec2.delete_tags(Resources=[iid], Tags=[{"Key": ELASTIC}]),
                         lambda hosts: ip not in hosts)
            results["delete-tags -> rescaled"][0].append(h)
            results["delete-tags -> rescaled"][1].append(s)
            jid, jip = joiners[i]
            h, s = trial(efs, rec, lambda: marker(efs, ec2, jid, jip), lambda hosts: jip in hosts)
            results["marker -> rescaled"][0].append(h)
            results["marker -> rescaled"][1].append(s)
            # Trials start at assorted phases of the 1 s interval, as real events do.
            time.sleep(0.37)
        print(f"latency: 20 workers, interval 1s, {trials} trials each (target: median under 1.5 s)")
        for name, (h, s) in results.items():
            report(name, h, s)
        hostfile = [t for h, _ in results.values() for t in h]
        signalled = [t for _, sig in results.values() for t in sig]
        report("all trials", hostfile, signalled)


def event_queue(url):
    """The queue and rule the stack creates: Spot warnings from EventBridge into SQS."""
    sqs, events = client("sqs", url), client("events", url)
    queue = sqs.create_queue(QueueName="bench-events")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    pattern = '{"source": ["aws.ec2"], "detail-type": ["EC2 Spot Instance Interruption Warning"]}'
    events.put_rule(Name="bench-events", EventPattern=pattern)
    events.put_targets(Rule="bench-events", Targets=[{"Id": "queue", "Arn": arn}])
    return queue, events


def spot_warning(events, instance_id):
    detail = '{"instance-id": "%s", "instance-action": "terminate"}' % instance_id
    events.put_events(Entries=[{"Source": "aws.ec2", "DetailType": "EC2 Spot Instance Interruption Warning",
                                "Detail": detail, "Resources": []}])


def bench_interruption(trials):
    with emulated_cluster() as (workdir, efs, ec2, url, procs):
        members = launch(ec2, trials + 2)
        for iid, ip in members:
            marker(efs, ec2, iid, ip)
        queue, events = event_queue(url)
        rec = SignalRecorder(efs)
        config = write_config(workdir, efs, "2s", 200, queue=queue)
        procs["dtd"] = start_dtd(config, url, workdir)
        wait("the workers to join", lambda: len(read_hosts(efs)) == len(members), timeout=60)
        time.sleep(2.5)
        hostfile, signalled = [], []
        for i in range(trials):
            iid, ip = members[i]
            h, s = trial(efs, rec, lambda: spot_warning(events, iid), lambda hosts: ip not in hosts)
            hostfile.append(h)
            signalled.append(s)
            # Events arrive at any phase of the 2 s interval.
            time.sleep(0.53)
        print(f"interruption: {len(members)} workers, interval 2s, {trials} Spot warnings through "
              f"EventBridge and SQS (target: median under 1 s)")
        report("warning -> job signalled", hostfile, signalled)


def peak_rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


def bench_memory(workers, passes, scrape=False, per_reservation=1, page_size=None):
    """`scrape`: with metrics.listen on, and /metrics fetched every 100 ms while the passes are
    timed (each scrape's time is kept), as a busy Prometheus would; the pass times then show what
    serving costs a pass."""
    with emulated_cluster() as (workdir, efs, ec2, url, procs):
        for iid, ip in launch(ec2, workers, per_reservation):
            marker(efs, ec2, iid, ip)
        listen = f"127.0.0.1:{free_port()}" if scrape else None
        config = write_config(workdir, efs, "1s", workers + 10, api_timeout="60s", metrics=listen,
                              page_size=page_size)
        procs["dtd"] = start_dtd(config, url, workdir)
        start = time.monotonic()
        wait(f"{workers} workers to join", lambda: len(read_hosts(efs)) == workers, timeout=600, step=0.2)
        joined = time.monotonic() - start
        status = os.path.join(efs, ".dt", "bench", "status.json")
        scrapes, size = [], [0]
        stop = threading.Event()
        scraper = threading.Thread(target=scrape_loop, args=(listen, scrapes, size, stop)) if scrape else None
        if scraper:
            scraper.start()
        # More full passes, so the steady state is measured too: each one's duration, as dtd
        # reports it, for the cost of a normal pass.
        pass_ms = []
        try:
            for _ in range(passes):
                before = os.path.getmtime(status) if os.path.exists(status) else 0
                wait("another pass", lambda: os.path.exists(status) and os.path.getmtime(status) > before,
                     timeout=120, step=0.05)
                with open(status) as f:
                    pass_ms.append(json.load(f)["pass_ms"])
        finally:
            stop.set()
            if scraper:
                scraper.join()
        kib = peak_rss_kib(procs["dtd"].pid)
        what = "with /metrics scraped every 100 ms" if scrape else "metrics off"
        print(f"memory ({what}): {workers} workers joined in {joined:.1f}s (moto-bound); "
              f"dtd peak RSS (VmHWM) {kib / 1024:.1f} MiB (target: under 40 MiB)")
        print(f"steady pass at {workers} workers ({what}) over {len(pass_ms)} passes: median "
              f"{statistics.median(pass_ms):.0f} ms, p95 {pct(pass_ms, 95):.0f} ms, "
              f"min {min(pass_ms)} ms, max {max(pass_ms)} ms")
        if scrape:
            ms = [t * 1000 for t in scrapes]
            print(f"scrape of /metrics at {workers} workers ({size[0]} bytes) over {len(ms)} scrapes: "
                  f"median {statistics.median(ms):.2f} ms, p95 {pct(ms, 95):.2f} ms, max {max(ms):.2f} ms "
                  f"(target: under 20 ms)")


def scrape_loop(listen, times, size, stop):
    host, port = listen.rsplit(":", 1)
    while not stop.is_set():
        start = time.perf_counter()
        conn = http.client.HTTPConnection(host, int(port), timeout=10)
        conn.request("GET", "/metrics")
        resp = conn.getresponse()
        body = resp.read()
        times.append(time.perf_counter() - start)
        conn.close()
        if resp.status != 200:
            raise SystemExit(f"/metrics answered {resp.status}: {body[:200]!r}")
        size[0] = len(body)
        stop.wait(0.1)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--trials", type=int, default=20, help="trials of each kind (default 20)")
    p.add_argument("--workers", type=int, default=1000, help="workers for the memory figure (default 1000)")
    p.add_argument("--passes", type=int, default=3, help="steady passes timed after the join (default 3)")
    p.add_argument("--per-reservation", type=int, default=1,
                   help="memory: workers launched per RunInstances call (default 1); moto pages "
                        "DescribeInstances by reservation, AWS by instance: with 1, moto pages as AWS does")
    p.add_argument("--page-size", type=int,
                   help="memory: workers.page_size in dtd's config (default: dtd's own default)")
    p.add_argument("--dtd", help="the dtd binary to measure (default: $DT_BIN_DIR/dtd, the one build of scripts/build)")
    p.add_argument("--only", choices=["latency", "interruption", "memory", "metrics"], help="run one benchmark")
    args = p.parse_args()
    global DTD
    if args.dtd:
        DTD = os.path.abspath(args.dtd)
    if args.trials < 1 or args.workers < 1:
        p.error("--trials and --workers must be at least 1")
    if args.only in (None, "latency"):
        bench_latency(args.trials)
    if args.only in (None, "interruption"):
        bench_interruption(args.trials)
    if args.only in (None, "memory", "metrics"):
        bench_memory(args.workers, args.passes, per_reservation=args.per_reservation,
                     page_size=args.page_size)
    if args.only in (None, "metrics"):
        bench_memory(args.workers, args.passes, scrape=True, per_reservation=args.per_reservation,
                     page_size=args.page_size)


if __name__ == "__main__":
    main()
