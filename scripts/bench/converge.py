#!/usr/bin/env python3
"""Benchmark item 6: controller convergence against boxtable-localapi.

    converge.py --api URL --pid OPERATOR_PID \
        --database-url URL --count 1000 --json out.json

1. Creates namespace `bench` and Secret `bench-db` (key connectionString = --database-url).
2. Waits until the operator watches BoxTables, then resets the API request counters.
3. POSTs --count BoxTables (outbox, schema public, tables bt0001..), one request each, over one
   keep-alive connection; the clock starts before the first POST.
4. Lists the BoxTables every --poll seconds until every one has condition Ready=True; the clock stops
   at the first list that shows them all Ready.
5. Reads the request counters and the operator's VmHWM (peak RSS) from /proc/PID/status.

The script counts its own requests (POSTs and lists) and subtracts them, so `operator_requests` is
what the operator sent while converging (watches count once each, when opened).
"""
import argparse
import http.client
import json
import sys
import time
import urllib.parse

GROUP_PATH = "/apis/brighter.dev/v1alpha1/namespaces/bench/boxtables"


class Api:
    def __init__(self, url):
        parsed = urllib.parse.urlparse(url)
        self.host, self.port = parsed.hostname, parsed.port
        self.conn = http.client.HTTPConnection(self.host, self.port, timeout=60)

    def call(self, method, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        for attempt in range(2):
            try:
                self.conn.request(method, path, body=data, headers=headers)
                resp = self.conn.getresponse()
                payload = resp.read()
                return resp.status, payload
            except (http.client.HTTPException, ConnectionError):
                if attempt:
                    raise
                self.conn.close()
                self.conn = http.client.HTTPConnection(self.host, self.port, timeout=60)
        raise RuntimeError("unreachable")


def expect(status, payload, ok, what):
    if status not in ok:
        sys.exit(f"converge: {what}: HTTP {status}: {payload[:500]!r}")


def boxtable(i):
    return {
        "apiVersion": "brighter.dev/v1alpha1",
        "kind": "BoxTable",
        "metadata": {"name": f"bt{i:04d}", "namespace": "bench"},
        "spec": {
            "box": "Outbox",
            "table": f"bt{i:04d}",
            "database": {"secretRef": {"name": "bench-db", "key": "connectionString"}},
        },
    }


def ready_count(items):
    n = 0
    for item in items:
        for c in item.get("status", {}).get("conditions", []) or []:
            if c.get("type") == "Ready" and c.get("status") == "True":
                n += 1
                break
    return n


def vm_hwm_kib(pid):
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--api", required=True)
    ap.add_argument("--pid", type=int, required=True)
    ap.add_argument("--database-url", required=True)
    ap.add_argument("--count", type=int, default=1000)
    ap.add_argument("--poll", type=float, default=0.5)
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--json", required=True)
    args = ap.parse_args()
    api = Api(args.api)
    status, body = api.call(
        "POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "bench"}}
    )
    expect(status, body, (200, 201, 409), "creating namespace bench")
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "bench-db", "namespace": "bench"},
        "stringData": {"connectionString": args.database_url},
    }
    status, body = api.call("POST", "/api/v1/namespaces/bench/secrets", secret)
    expect(status, body, (200, 201), "creating secret bench-db")

    # Started = the operator has listed BoxTables and opened its watch (seen in the API's counters).
    # (Waiting for the watch rather than /readyz keeps the start signal independent of the
    # operator's own health endpoint.)
    deadline = time.monotonic() + 60
    while True:
        status, body = api.call("GET", "/__localapi/stats")
        if json.loads(body).get("byVerb", {}).get("watch boxtables", 0) >= 1:
            break
        if time.monotonic() > deadline:
            sys.exit("converge: the operator never started watching BoxTables")
        time.sleep(0.1)
    time.sleep(1.0)  # let the initial list/watch settle before counting
    api.call("POST", "/__localapi/stats/reset")

    started = time.monotonic()
    for i in range(1, args.count + 1):
        status, body = api.call("POST", GROUP_PATH, boxtable(i))
        expect(status, body, (201,), f"creating bt{i:04d}")
    applied = time.monotonic() - started
    polls = 0
    progress = []
    while True:
        status, body = api.call("GET", GROUP_PATH)
        polls += 1
        expect(status, body, (200,), "listing boxtables")
        items = json.loads(body)["items"]
        n = ready_count(items)
        elapsed = time.monotonic() - started
        progress.append((round(elapsed, 2), n))
        if n == args.count and len(items) == args.count:
            break
        if elapsed > args.timeout:
            sys.exit(f"converge: only {n}/{args.count} Ready after {elapsed:.0f}s")
        time.sleep(args.poll)
    converged = time.monotonic() - started
    peak_kib = vm_hwm_kib(args.pid)
    status, body = api.call("GET", "/__localapi/stats")
    stats = json.loads(body)
    ours = args.count + polls
    by_verb = dict(stats.get("byVerb", {}))
    by_verb["create boxtables"] = by_verb.get("create boxtables", 0) - args.count
    by_verb["list boxtables"] = by_verb.get("list boxtables", 0) - polls
    by_verb = {k: v for k, v in by_verb.items() if v}
    operator_requests = stats["total"] - ours
    out = {
        "count": args.count,
        "apply_seconds": applied,
        "converge_seconds": converged,
        "peak_rss_kib": peak_kib,
        "operator_requests": operator_requests,
        "requests_per_boxtable": operator_requests / args.count,
        "operator_requests_by_verb": by_verb,
        "progress": progress[:: max(1, len(progress) // 20)] + progress[-1:],
    }
    with open(args.json, "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1)
    sys.stderr.write(
        f"  {args.count} BoxTables Ready in {converged:.1f}s (applied in {applied:.1f}s), "
        f"peak RSS {peak_kib/1024:.1f} MiB, {operator_requests/args.count:.2f} operator requests/BoxTable\n"
        f"  by verb: {json.dumps(by_verb, sort_keys=True)}\n"
    )


if __name__ == "__main__":
    main()
