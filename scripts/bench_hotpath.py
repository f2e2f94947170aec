#!/usr/bin/env python3
"""Issue 10's benchmark: does dtd's reaction to one worker grow with the fleet?

The release `dtd` against moto on 127.0.0.1 with the default `interval` (2s, not set in the
config), 2 base workers, and the event queue as the stack configures it (an SQS queue, the
instance-events rule with `EC2 Instance State-change Notification`, and a rule for `Tag Change on
Resource` events of the elastic tag). The job is a small process of this script's (pidfile +
SIGUSR1; this script acknowledges for it through the `ack` file). Each case is run with a number of OTHER workers in the account
(`--others 0,1000`): launched from the worker template, their markers written and joined (the host
file lists them all) before anything is measured, so the fleet really is that large.

Each trial follows one fresh worker through the three steps a person and the job cause:
  join     launch it (run_instances from the template), put the `EC2 Instance State-change
           Notification` events AWS would send (pending, then running) with PutEvents, since moto
           sends none; a moment later the worker writes `prepare_data_success_<ip>`. The clock
           starts at that write and stops when the host file lists the IP, and when SIGUSR1 arrives.
  leave    delete its elastic tag (DeleteTags), then put the `Tag Change on Resource` event AWS
           would send for it. The clock starts before DeleteTags and stops when the host file no
           longer lists it, and when SIGUSR1 arrives.
  release  the job acknowledges: it writes the generation it read from `generation` to `ack`. The
           clock starts at that write and stops when DescribeInstances (by id, every ~10 ms) shows
           the instance shutting-down or terminated. The time dtd's TerminateInstances call reached
           the proxy (below) is shown beside it.
Pauses of assorted lengths between the steps make them land at every phase of the interval.

calls/min: with the fleet joined and nothing changing, dtd's AWS requests over `--window` seconds,
counted per action by a small HTTP proxy between dtd and moto (dtd's AWS_ENDPOINT_URL; this
script's own calls go to moto directly). Every dtd call, in every step, goes through the proxy.

Run it with `scripts/bench hotpath [ARGS]` (after the one build), or directly with --dtd.
Both cases with 20 trials take about 13 minutes (launching 1,000 instances in moto about 10 s,
dtd joining them about 6 s, each trial at 1,000 about 25 s).
"""

import argparse
import collections
import contextlib
import datetime
import http.client
import http.server
import json
import os
import re
import shutil
import signal
import subprocess
import statistics
import sys
import threading
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_emulator as be  # noqa: E402  (the shared helpers: moto, template, launch, markers)

ACCOUNT = "123456789012"  # moto's default account
REGION = "us-east-1"

# ---------------------------------------------------------------------------------------------
# A counting proxy between dtd and moto


class CountingProxy:
    """Forwards every request to moto and counts it by service and action: `X-Amz-Target` (JSON
    protocols: SQS, EventBridge) or `Action=` (query protocols: EC2, Auto Scaling, STS), the
    service from the SigV4 credential scope. Threaded, keep-alive, bound to 127.0.0.1."""

    HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer",
           "upgrade", "expect", "content-length", "host"}

    def __init__(self, upstream):
        u = urllib.parse.urlsplit(upstream)
        self.upstream = (u.hostname, u.port)
        self.lock = threading.Lock()
        self.calls = collections.Counter()
        self.bytes = collections.Counter()
        self.terminations = []  # (monotonic time the request arrived, request body)
        self.local = threading.local()
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *_):
                pass

            def do_POST(self):
                proxy.forward(self)

            do_GET = do_PUT = do_DELETE = do_HEAD = do_POST

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *_):
        self.server.shutdown()
        self.server.server_close()

    def snapshot(self):
        with self.lock:
            return collections.Counter(self.calls), collections.Counter(self.bytes)

    @staticmethod
    def action(headers, body, path):
        scope = re.search(r"Credential=[^/]+/[^/]+/[^/]+/([^/]+)/", headers.get("Authorization", ""))
        service = scope.group(1) if scope else "?"
        target = headers.get("X-Amz-Target")
        if target:
            return f"{service}:{target.rsplit('.', 1)[-1]}"
        for text in (body.decode("utf-8", "replace"), urllib.parse.urlsplit(path).query):
            action = urllib.parse.parse_qs(text).get("Action")
            if action:
                return f"{service}:{action[0]}"
        return f"{service}:?"

    def read_body(self, req):
        if req.headers.get("Transfer-Encoding", "").lower() == "chunked":
            body = b""
            while True:
                size = int(req.rfile.readline().split(b";")[0], 16)
                chunk = req.rfile.read(size)
                req.rfile.readline()
                if size == 0:
                    while req.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return body
                body += chunk
        return req.rfile.read(int(req.headers.get("Content-Length") or 0))

    def upstream_call(self, method, path, body, headers):
        for attempt in (1, 2):  # a kept-alive connection moto closed: once more on a fresh one
            conn = getattr(self.local, "conn", None)
            if conn is None:
                conn = self.local.conn = http.client.HTTPConnection(*self.upstream, timeout=120)
            try:
                conn.request(method, path, body, headers)
                resp = conn.getresponse()
                return resp, resp.read()
            except (http.client.HTTPException, OSError):
                conn.close()
                self.local.conn = None
                if attempt == 2:
                    raise

    def forward(self, req):
        arrived = time.monotonic()
        body = self.read_body(req)
        key = self.action(req.headers, body, req.path)
        if key.endswith(":TerminateInstances"):  # before moto acts on it: the bench may look at once
            with self.lock:
                self.terminations.append((arrived, body.decode("utf-8", "replace")))
        headers = {k: v for k, v in req.headers.items() if k.lower() not in self.HOP}
        headers["Host"] = "%s:%d" % self.upstream
        headers["Content-Length"] = str(len(body))
        try:
            resp, data = self.upstream_call(req.command, req.path, body, headers)
        except (http.client.HTTPException, OSError) as e:
            with contextlib.suppress(OSError):  # dtd may be gone too (at the end of a run)
                req.send_error(502, f"moto: {e}")
            return
        req.send_response_only(resp.status, resp.reason)
        for k, v in resp.getheaders():
            if k.lower() not in self.HOP:
                req.send_header(k, v)
        req.send_header("Content-Length", str(len(data)))
        req.end_headers()
        if req.command != "HEAD":
            req.wfile.write(data)
        with self.lock:
            self.calls[key] += 1
            self.bytes[key] += len(data)

    def terminate_sent(self, instance_id, since):
        with self.lock:
            return next((t for t, b in self.terminations if t >= since and instance_id in b), None)


# ---------------------------------------------------------------------------------------------
# The event queue as the stack makes it, and the events AWS would put on it

INSTANCE_EVENTS = [  # cloudformation/dynamic-training.yaml, InstanceEventsRule
    "EC2 Spot Instance Interruption Warning",
    "EC2 Capacity Reservation Instance Interruption Warning",
    "EC2 Interruptible Capacity Reservation Instance Interruption Warning",
    "EC2 Instance Rebalance Recommendation",
    "EC2 Instance State-change Notification",
    "Capacity Block Expiration Warning",
    "Capacity Block Reservation Expiration Warning",
]


def event_queue(url):
    """The stack's queue, its instance-events rule, and the rule for changes of the elastic tag
    (the stack is getting it in parallel; here made the same way with boto3)."""
    sqs, events = be.client("sqs", url), be.client("events", url)
    queue = sqs.create_queue(QueueName="bench-events")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    rules = {
        "bench-instance-events": {"source": ["aws.ec2"], "detail-type": INSTANCE_EVENTS},
        "bench-elastic-tag-events": {"source": ["aws.tag"], "detail-type": ["Tag Change on Resource"],
                                     "detail": {"changed-tag-keys": [be.ELASTIC]}},
    }
    for name, pattern in rules.items():
        events.put_rule(Name=name, EventPattern=json.dumps(pattern), State="ENABLED")
        events.put_targets(Rule=name, Targets=[{"Id": "queue", "Arn": arn}])
    return queue, events


def instance_arn(instance_id):
    return f"arn:aws:ec2:{REGION}:{ACCOUNT}:instance/{instance_id}"


def put_event(events, source, detail_type, resources, detail):
    out = events.put_events(Entries=[{
        "Source": source, "DetailType": detail_type, "Resources": resources,
        "Detail": json.dumps(detail), "Time": datetime.datetime.now(datetime.timezone.utc)}])
    if out.get("FailedEntryCount"):
        sys.exit(f"PutEvents failed: {out}")


def state_change(events, instance_id, state):
    # As "State change events for Amazon EC2 instances" (EC2 User Guide,
    # docs.aws.amazon.com/AWSEC2/latest/UserGuide/monitoring-instance-state-changes.html) shows it:
    # source aws.ec2, resources [the instance's ARN], detail {"instance-id", "state"}.
    put_event(events, "aws.ec2", "EC2 Instance State-change Notification", [instance_arn(instance_id)],
              {"instance-id": instance_id, "state": state})


def tag_change(events, instance_id, tags_after, changed):
    # As "Monitor tag changes with serverless workflows and Amazon EventBridge" (Tagging AWS
    # Resources and Tag Editor user guide, docs.aws.amazon.com/tag-editor/latest/userguide/
    # tag-monitor.html) shows it, and "Tags events" (EventBridge events reference,
    # docs.aws.amazon.com/eventbridge/latest/ref/events-ref-tag.html): source aws.tag, resources
    # [the instance's ARN], detail {"changed-tag-keys": the new, updated and deleted keys, "tags":
    # the resource's tags after the change (a deleted key is absent), "service": "ec2",
    # "resource-type": "instance", "version": the resource's tag version (an integer)}.
    put_event(events, "aws.tag", "Tag Change on Resource", [instance_arn(instance_id)], {
        "changed-tag-keys": changed, "service": "ec2", "resource-type": "instance",
        "version": 2, "tags": tags_after})


# ---------------------------------------------------------------------------------------------
# The cluster


def write_config(workdir, efs, base_ips, max_workers, queue):
    """No `interval`: the default (2s) is what is measured. api_timeout 60s, as bench_memory: moto
    answers a 1,000-instance DescribeInstances in seconds, and a timeout would measure moto."""
    path = os.path.join(workdir, "dtd.yaml")
    with open(path, "w") as f:
        f.write(f"""cluster: bench
workers:
  launch_template: bench-worker
  min: 0
  max: {max_workers}
  base_hosts: [{", ".join(base_ips)}]
{be.reports_config()}shared_dir: {efs}
hostfiles:
  - {{ path: {efs}/host_worker, format: mxnet }}
job:
  notify: {{ signal: SIGUSR1, pidfile: {efs}/job.pid }}
  ack: {{ file: {efs}/ack, timeout: 10m }}
events:
  queue_url: {queue}
api_timeout: 60s
allow_local_state_dir: true
""")
    return path


def start_dtd(config, endpoint, workdir, rust_log):
    env = dict(os.environ, AWS_ENDPOINT_URL=endpoint, AWS_ACCESS_KEY_ID="bench",
               AWS_SECRET_ACCESS_KEY="bench", AWS_REGION=REGION, RUST_LOG=rust_log)
    log = open(os.path.join(workdir, "dtd.log"), "w")
    return subprocess.Popen([be.DTD, "run", "--config", config], env=env, stderr=log, stdout=log)


def write_atomic(path, text):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.rename(tmp, path)


def unique_ips(ec2, base, fleet):
    """moto draws private IPs at random from 10/8: two of a thousand sometimes share one, which EC2
    never does (and then only one of them can be a worker). The second of such a pair is
    terminated, as if never launched, and replaced."""
    seen = {ip for _, ip in base}
    kept = []
    for iid, ip in fleet:
        if ip in seen:
            ec2.terminate_instances(InstanceIds=[iid])
            (iid, ip), = be.launch(ec2, 1)
            while ip in seen:
                ec2.terminate_instances(InstanceIds=[iid])
                (iid, ip), = be.launch(ec2, 1)
        seen.add(ip)
        kept.append((iid, ip))
    return kept


def launch_many(ec2, count, what):
    out, started = [], time.monotonic()
    while len(out) < count:
        out += be.launch(ec2, min(50, count - len(out)), per_reservation=50)
        if len(out) % 200 == 0 or len(out) == count:
            print(f"  {what}: {len(out)}/{count} launched in moto ({time.monotonic() - started:.0f}s)",
                  flush=True)
    return out


class LoadSampler:
    """The 1-minute load average every 5 s while a case runs (other work shares the machine)."""

    def __init__(self):
        self.samples, self.stop = [], threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self):
        while not self.stop.is_set():
            with open("/proc/loadavg") as f:
                self.samples.append(float(f.read().split()[0]))
            self.stop.wait(5)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *_):
        self.stop.set()

    def summary(self):
        s = self.samples or [0.0]
        return f"load (1-min avg) min {min(s):.2f} median {statistics.median(s):.2f} max {max(s):.2f}"


def status_mtime(efs):
    path = os.path.join(efs, ".dt", "bench", "status.json")
    return os.path.getmtime(path) if os.path.exists(path) else 0


def wait_passes(efs, n, timeout=300):
    for _ in range(n):
        before = status_mtime(efs)
        be.wait("another pass", lambda: status_mtime(efs) > before, timeout=timeout, step=0.05)


# ---------------------------------------------------------------------------------------------
# The trials


def gap(i, step):
    """0.3 to 2.3 s, spread so that steps start at assorted phases of the 2 s interval."""
    return 0.3 + ((3 * i + step) * 0.61) % 2.0


def join(ec2, events, efs, rec, i):
    (iid, ip), = be.launch(ec2, 1)
    be.boot(iid, ip)  # its agent starts at boot and says hello
    state_change(events, iid, "pending")
    state_change(events, iid, "running")
    time.sleep(gap(i, 0))  # the worker prepares its data, then writes its marker
    start = time.monotonic()
    be.marker(efs, ec2, iid, ip)
    be.wait(f"{ip} in the host file", lambda: ip in be.read_hosts(efs), timeout=300)
    hosts_at = time.monotonic()
    be.wait("the signal", lambda: rec.after(start) is not None, timeout=300)
    return (iid, ip), hosts_at - start, rec.after(start) - start


def leave(ec2, events, efs, rec, iid, ip):
    start = time.monotonic()
    ec2.delete_tags(Resources=[iid], Tags=[{"Key": be.ELASTIC}])
    tags = {t["Key"]: t["Value"] for t in
            ec2.describe_tags(Filters=[{"Name": "resource-id", "Values": [iid]}])["Tags"]}
    tag_change(events, iid, tags, [be.ELASTIC])
    be.wait(f"{ip} out of the host file", lambda: ip not in be.read_hosts(efs), timeout=300)
    hosts_at = time.monotonic()
    be.wait("the signal", lambda: rec.after(start) is not None, timeout=300)
    return hosts_at - start, rec.after(start) - start


def release(ec2, efs, proxy, iid, poll):
    with open(os.path.join(efs, "generation")) as f:
        generation = f.read().strip()
    start = time.monotonic()
    write_atomic(os.path.join(efs, "ack"), generation + "\n")
    deadline = start + 300
    while True:
        r = ec2.describe_instances(InstanceIds=[iid])
        state = r["Reservations"][0]["Instances"][0]["State"]["Name"]
        if state in ("shutting-down", "terminated"):
            break
        if time.monotonic() > deadline:
            sys.exit(f"timed out waiting for {iid} to terminate (still {state})")
        time.sleep(poll)
    seen = time.monotonic() - start
    sent = proxy.terminate_sent(iid, start)
    return seen, (sent - start) if sent else float("nan")


def stats(values):
    v = [x for x in values if x == x]  # without NaN
    if not v:
        return "-"
    return f"median {statistics.median(v):6.3f}s  p95 {be.pct(v, 95):6.3f}s  max {max(v):6.3f}s"


def calls_per_minute(proxy, window):
    calls0, bytes0 = proxy.snapshot()
    time.sleep(window)
    calls1, bytes1 = proxy.snapshot()
    per_min = 60.0 / window
    calls, sizes = calls1 - calls0, bytes1 - bytes0
    total = sum(calls.values()) * per_min
    rows = [(k, n * per_min, sizes[k] * per_min / 1e6) for k, n in sorted(calls.items(), key=lambda kv: -kv[1])]
    return total, rows


def run_case(others, trials, window, logs, rust_log, poll):
    """One fleet size: returns a dict of results (see print_case)."""
    result = {"others": others, "poll": poll}
    with be.emulated_cluster() as (workdir, efs, ec2, url, procs), CountingProxy(url) as proxy, \
            be.SignalRecorder(efs) as rec, LoadSampler() as load:
        try:
            print(f"== {others} other workers: setting up moto", flush=True)
            base = be.launch(ec2, 2)
            fleet = launch_many(ec2, others, "other workers") if others else []
            fleet = unique_ips(ec2, base, fleet)
            for iid, ip in base + fleet:
                be.marker(efs, ec2, iid, ip)
            queue, events = event_queue(url)
            config = write_config(workdir, efs, [ip for _, ip in base], others + 2 + trials + 10, queue)
            procs["dtd"] = start_dtd(config, proxy.url, workdir, rust_log)
            started = time.monotonic()
            want = len(base) + len(fleet)
            print(f"  dtd started (endpoint {proxy.url}, a proxy to moto); waiting for it to join "
                  f"{want} workers" + (" (moto lists 1,000 in about 6 s)" if others >= 500 else ""),
                  flush=True)
            be.wait(f"{want} workers in the host file", lambda: len(be.read_hosts(efs)) == want,
                    timeout=1800, step=0.2)
            result["joined_s"] = time.monotonic() - started
            print(f"  {want} joined in {result['joined_s']:.1f}s; two more passes to settle", flush=True)
            wait_passes(efs, 2)
            print(f"  counting dtd's AWS calls over {window:.0f}s, nothing changing", flush=True)
            result["calls"] = calls_per_minute(proxy, window)
            result["workers"] = want
            res = {"join": ([], []), "leave": ([], []), "release": ([], [])}
            for i in range(trials):
                t0 = time.monotonic()
                (iid, ip), h, s = join(ec2, events, efs, rec, i)
                res["join"][0].append(h)
                res["join"][1].append(s)
                time.sleep(gap(i, 1))
                h2, s2 = leave(ec2, events, efs, rec, iid, ip)
                res["leave"][0].append(h2)
                res["leave"][1].append(s2)
                time.sleep(gap(i, 2))
                seen, sent = release(ec2, efs, proxy, iid, poll)
                res["release"][0].append(seen)
                res["release"][1].append(sent)
                print(f"  trial {i + 1}/{trials} ({time.monotonic() - t0:.0f}s): join {h:.2f}s/{s:.2f}s, "
                      f"leave {h2:.2f}s/{s2:.2f}s, release {seen:.2f}s (terminate sent {sent:.2f}s)  "
                      f"[host file/signal]", flush=True)
                time.sleep(gap(i, 3))
            result["trials"] = res
            result["load"] = load.summary()
            result["dtd_rss_kib"] = be.peak_rss_kib(procs["dtd"].pid)
        finally:
            if logs:
                keep_logs(workdir, efs, os.path.join(logs, f"others-{others}"), procs)
    return result


def keep_logs(workdir, efs, dest, procs):
    if "dtd" in procs and procs["dtd"].poll() is None:
        procs["dtd"].terminate()  # so dtd.log ends with its stop
        procs["dtd"].wait()
    os.makedirs(dest, exist_ok=True)
    for src in [os.path.join(workdir, n) for n in ("dtd.log", "moto.log", "dtd.yaml")] + \
               [os.path.join(efs, ".dt", "bench", n) for n in ("events.jsonl", "status.json", "state.json")]:
        if os.path.exists(src):
            shutil.copy(src, dest)
    print(f"  logs kept in {dest}", flush=True)


def print_case(r, window):
    print(f"\n== {r['workers']} workers ({r['others']} others + 2 base), interval 2s (default), "
          f"{len(r['trials']['join'][0])} trials; {r['load']}")
    print(f"   joined all in {r['joined_s']:.1f}s; dtd peak RSS {r['dtd_rss_kib'] / 1024:.1f} MiB")
    names = {"join": ("marker -> host file", "marker -> job signalled"),
             "leave": ("delete-tags -> host file", "delete-tags -> job signalled"),
             "release": (f"ack -> shutting-down seen ({r['poll'] * 1000:.0f} ms poll)", "ack -> TerminateInstances sent")}
    for step, (a, b) in names.items():
        h, s = r["trials"][step]
        print(f"   {a:<40} {stats(h)}")
        print(f"   {b:<40} {stats(s)}")
    total, rows = r["calls"]
    print(f"   dtd's AWS calls, steady state over {window:.0f}s: {total:.1f}/min")
    for key, per_min, mb in rows:
        print(f"     {key:<40} {per_min:7.1f}/min  {mb:8.2f} MB/min of responses")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--trials", type=int, default=20, help="trials per fleet size (default 20)")
    p.add_argument("--others", default="0,1000",
                   help="comma-separated numbers of other joined workers, one case each (default 0,1000)")
    p.add_argument("--trials-at", default="",
                   help="trials for particular fleet sizes, e.g. 1000=10 (default: --trials for all)")
    p.add_argument("--window", type=float, default=60, help="seconds of steady state whose AWS calls are counted (default 60)")
    p.add_argument("--dtd", help="the dtd binary to measure (default: $DT_BIN_DIR/dtd, the one build of scripts/build)")
    p.add_argument("--logs", help="copy dtd.log, moto.log and the journal of each case under this directory")
    p.add_argument("--poll", type=float, default=0.01,
                   help="seconds between the release step's DescribeInstances calls (default 0.01; each costs moto about 10 ms "
                        "at 1,000 instances, time its full listing for dtd does not get)")
    p.add_argument("--rust-log", default="info", help="dtd's RUST_LOG (default info)")
    args = p.parse_args()
    if args.dtd:
        be.DTD = os.path.abspath(args.dtd)
    try:
        sizes = [int(x) for x in args.others.split(",") if x.strip()]
        per_size = {int(k): int(v) for k, v in (kv.split("=") for kv in args.trials_at.split(",") if kv.strip())}
    except ValueError:
        p.error("--others takes numbers like 0,1000; --trials-at pairs like 1000=10")
    if args.trials < 1 or args.window <= 0 or any(n < 0 for n in sizes):
        p.error("--trials must be at least 1, --window positive, --others not negative")
    # SIGTERM too stops everything this started (the context managers' cleanup runs).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("stopped by SIGTERM"))
    print(f"dtd: {be.DTD}; load now: {open('/proc/loadavg').read().strip()}", flush=True)
    results = [run_case(n, per_size.get(n, args.trials), args.window, args.logs, args.rust_log, args.poll)
               for n in sizes]
    for r in results:
        print_case(r, args.window)


if __name__ == "__main__":
    main()
