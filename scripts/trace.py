#!/usr/bin/env python3
"""Spot availability traces for scripts/bench-trace: read one and turn it into the replay's
events, or generate a synthetic one.

  trace.py events TRACE --nodes 4 --speed 60 [--from-hour 0] [--hours 2] [--warning 120]
                        [--rebalance 0] [--prepare 300] [--seed 1]   JSON events on stdout
  trace.py generate --nodes 4 --hours 6 --rate 1 [--burst 0] [--back 10] [--unwarned 0]
                        [--seed 1]                           a trace (CSV) on stdout

A trace is CSV, `milliseconds,kind,node` (kind: add, remove: reclaimed with EC2's two-minute
warning, vanish: gone without one), or SkyPilot's JSON counts (`{"metadata": {"gap_seconds": N},
"data": [...]}`). `events` keeps the slice asked for, scales the trace's count of available
instances to `--nodes` (its peak in the slice becomes `--nodes`) and divides its time by
`--speed`. Each rise of the scaled count is an instance arriving (it boots and prepares for
`--prepare` trace seconds); each fall reclaims one of the running instances, the seed choosing
which, with the warning (`--warning` trace seconds before it goes) unless the trace says vanish,
and with `--rebalance S` (more than the warning) a rebalance recommendation S trace seconds
before it goes (no public trace records them: this models EC2 sending one ahead of each warned
reclaim).
It also prints the ideal the benchmark compares against: the node-seconds the scaled trace
offers, and the share of them new instances must spend preparing.
"""
import argparse
import csv
import json
import random
import sys

HOUR_MS = 3_600_000


def read(path):
    """[(ms, delta, warned)] sorted by time, from CSV events or SkyPilot counts."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if text.lstrip().startswith("{"):
        return _counts(json.loads(text))
    steps = []
    for n, row in enumerate(csv.reader(text.splitlines()), 1):
        if not row:
            continue
        if len(row) < 3 or row[1] not in ("add", "remove", "vanish"):
            raise SystemExit(f"{path}:{n}: expected 'milliseconds,add|remove|vanish,node', got {row}")
        try:
            ms = int(row[0])
        except ValueError:
            raise SystemExit(f"{path}:{n}: {row[0]!r} is not a time in milliseconds") from None
        steps.append((ms, 1 if row[1] == "add" else -1, row[1] != "vanish"))
    steps.sort(key=lambda s: s[0])
    return steps


def _counts(body):
    gap = int(body["metadata"]["gap_seconds"]) * 1000
    steps, last = [], 0
    for i, count in enumerate(body["data"]):
        for _ in range(abs(count - last)):
            steps.append((i * gap, 1 if count > last else -1, True))
        last = count
    return steps


def counts(steps, start_ms, end_ms):
    """The count of available instances as [(ms from start, count)], from start to end."""
    n, series = 0, []
    for ms, delta, warned in steps:
        if ms > start_ms:
            break
        n += delta
    series.append((0, n, True))
    for ms, delta, warned in steps:
        if start_ms < ms < end_ms:
            n += delta
            series.append((ms - start_ms, n, warned))
    return series


def scaled(series, nodes):
    peak = max(c for _, c, _ in series) or 1
    # Half up, not Python's half to even: 1.5 and 2.5 instances offered both round up.
    return [(ms, int(c * nodes / peak + 0.5), warned) for ms, c, warned in series]


def events(steps, nodes, speed, from_hour, hours, warning_s, prepare_s, seed, rebalance_s=0.0):
    start = int(from_hour * HOUR_MS)
    end = start + int(hours * HOUR_MS) if hours else max(ms for ms, _, _ in steps) + 1
    series = scaled(counts(steps, start, end), nodes)
    rng = random.Random(seed)
    running, out, next_slot = [], [], 0
    arrived = {}
    ideal = forced = 0.0
    last_ms, n = 0, 0
    for ms, count, warned in series:
        at = ms / 1000 / speed
        ideal += n * (ms - last_ms) / 1000 / speed
        last_ms = ms
        while n < count:
            out.append({"at": round(at, 3), "kind": "arrive", "slot": next_slot})
            running.append(next_slot)
            arrived[next_slot] = at
            next_slot += 1
            n += 1
        while n > count:
            slot = running.pop(rng.randrange(len(running)))
            kind = "warn" if warned else "vanish"
            # Warned ahead: the trace's time is when the instance goes.
            when = max(at - (warning_s / speed if warned else 0), arrived[slot])
            if warned and rebalance_s > warning_s:
                early = max(at - rebalance_s / speed, arrived[slot])
                out.append({"at": round(early, 3), "kind": "rebalance", "slot": slot})
            out.append({"at": round(when, 3), "kind": kind, "slot": slot, "gone": round(at, 3)})
            forced += min(prepare_s / speed, at - arrived.pop(slot))
            n -= 1
    duration = (end - start) / 1000 / speed
    ideal += n * (end - start - last_ms) / 1000 / speed
    for slot, at in arrived.items():
        forced += min(prepare_s / speed, duration - at)
    out.sort(key=lambda e: e["at"])
    return {
        "nodes": nodes,
        "speed": speed,
        "warning_s": warning_s / speed,
        "rebalance_s": rebalance_s / speed,
        "prepare_s": prepare_s / speed,
        "duration_s": round(duration, 3),
        "ideal_node_s": round(ideal, 3),
        "forced_prepare_node_s": round(forced, 3),
        "events": out,
    }


def generate(nodes, hours, rate, burst, back_min, unwarned, seed):
    """Interruptions at `rate` per node-hour (a Poisson process over the running nodes); each
    takes, with probability `burst`, every other running node with it (a reclaim of a whole
    pool); capacity comes back after an exponential time of mean `back_min` minutes."""
    rng = random.Random(seed)
    end = hours * HOUR_MS
    lines, names = [], iter(f"node{i}" for i in range(1, 1_000_000))
    running = [next(names) for _ in range(nodes)]
    lines += [(0, "add", name) for name in running]
    returns = []  # ms at which a slot's capacity comes back
    t = 0.0
    while True:
        total = rate * len(running) / HOUR_MS
        wait = rng.expovariate(total) if total else float("inf")
        soonest = min(returns, default=float("inf"))
        if soonest <= t + wait:
            t = soonest
            returns.remove(soonest)
            if t >= end:
                break
            name = next(names)
            running.append(name)
            lines.append((int(t), "add", name))
            continue
        t += wait
        if t >= end:
            break
        taken = [running.pop(rng.randrange(len(running)))]
        if burst and rng.random() < burst:
            taken, running = taken + running, []
        for name in taken:
            kind = "vanish" if rng.random() < unwarned else "remove"
            lines.append((int(t), kind, name))
            returns.append(t + rng.expovariate(1 / (back_min * 60_000)))
    return lines


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("events", help="a trace as the replay's events (JSON)")
    e.add_argument("trace")
    e.add_argument("--nodes", type=int, default=4)
    e.add_argument("--speed", type=float, default=60.0, help="trace seconds per replayed second")
    e.add_argument("--from-hour", type=float, default=0.0)
    e.add_argument("--hours", type=float, default=0.0, help="0: to the trace's end")
    e.add_argument("--warning", type=float, default=120.0, help="trace seconds of Spot warning")
    e.add_argument("--rebalance", type=float, default=0.0,
                   help="trace seconds before a warned reclaim its rebalance recommendation comes "
                        "(0: none; more than --warning)")
    e.add_argument("--prepare", type=float, default=300.0,
                   help="trace seconds a new instance boots and prepares")
    e.add_argument("--seed", type=int, default=1)
    g = sub.add_parser("generate", help="a synthetic trace (CSV)")
    g.add_argument("--nodes", type=int, default=4)
    g.add_argument("--hours", type=float, default=6.0)
    g.add_argument("--rate", type=float, default=1.0, help="interruptions per node-hour")
    g.add_argument("--burst", type=float, default=0.0,
                   help="chance an interruption takes every running node")
    g.add_argument("--back", type=float, default=10.0, help="mean minutes until capacity returns")
    g.add_argument("--unwarned", type=float, default=0.0, help="share of interruptions without a warning")
    g.add_argument("--seed", type=int, default=1)
    a = p.parse_args(argv)
    if a.cmd == "generate":
        if a.nodes < 1 or a.hours <= 0 or a.rate < 0 or a.back <= 0:
            p.error("--nodes >= 1, --hours > 0, --rate >= 0 and --back > 0")
        for ms, kind, name in generate(a.nodes, a.hours, a.rate, a.burst, a.back, a.unwarned, a.seed):
            print(f"{ms},{kind},{name}")
        return 0
    if a.nodes < 1 or a.speed <= 0 or a.hours < 0:
        p.error("--nodes >= 1, --speed > 0, --hours >= 0")
    if a.rebalance and a.rebalance <= a.warning:
        p.error("--rebalance: 0, or more trace seconds than --warning (it comes before the warning)")
    steps = read(a.trace)
    if not steps:
        raise SystemExit(f"{a.trace}: no events")
    json.dump(events(steps, a.nodes, a.speed, a.from_hour, a.hours, a.warning, a.prepare, a.seed,
                     a.rebalance), sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
