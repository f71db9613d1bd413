#!/usr/bin/env python3
"""Benchmark item 6: the operator at scale on the real kube-apiserver (scripts/control-plane.sh).

    scale.py --server URL --ca ca.crt --cert admin.crt --key admin.key --audit-log audit.log \
        --operator-user USER --operator-cmd 'boxtable-operator run ...' --metrics URL \
        --database-url URL --psql PSQL --admin-url URL --database NAME \
        --count 10000 --schemas 1000 --secrets 2000 --secret-kib 200 --json out.json

Setup (not timed as the operator's time; the durations are reported):
1. Namespace `bench` with Secret `bench-db` (key connectionString), and namespace `bench-noise` with
   --secrets unrelated Secrets of --secret-kib KiB each (random data), POSTed in parallel.
2. Starts the operator (--operator-cmd) and waits for its /readyz (its caches have synced).

Convergence:
3. Opens a watch on BoxTables in `bench`, then POSTs --count BoxTables in parallel (outbox tables
   t00..t09 spread over schemas s0001.. of one database, --count / --schemas per schema); the clock
   starts before the first POST. Ready = every BoxTable's Ready condition True, as seen by the watch.
4. Reads the operator's VmHWM (peak RSS), stops it, and counts from the audit log the requests made
   by --operator-user between the first POST and the last Ready (by verb and resource), and from
   pg_stat_database.sessions the sessions opened on the database (read after the operator has
   exited, when every session's counters are flushed).

New BoxTables in the fleet (--new, default 0 = skipped):
5. With the fleet Ready and the operator resyncing at its interval, --new BoxTables are created one
   by one, --new-gap seconds apart (POST -> Ready seen by a watch, p50/p95/max).

No-op resync:
6. Starts the operator again: every BoxTable is new to it, so it owes each one pass (a drift
   check that finds the table up to date), spread over the resync interval for those already
   current. Measured from process start (so the initial list and watch are included) until
   boxtable_reconciles_total counts --count passes, with the requests (and their peak rate per
   second and per 10 s, from the audit log's timestamps), status writes (must be 0), sessions and
   peak memory of that process. With --new, as many new BoxTables are created the same way right
   after the restart (the operator Ready), while the resync runs.

--pod runs the operator as the Pods of the Deployment --deployment in --pod-namespace (installed
with 0 replicas; scaled to --replicas to start, to 0 to stop) on the node of scripts/node.sh, and
reads the leader's memory and CPU from its container's cgroups (v1) on this host: peak memory
(memory.max_usage_in_bytes) against the limit (memory.limit_in_bytes), memory.failcnt, OOM kills
(memory.oom_control of the Pod's cgroup) and the containers' restarts; its /metrics through the API
server's Pod proxy.
"""
import argparse
import base64
import datetime
import concurrent.futures
import http.client
import json
import os
import signal
import ssl
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request

BOXTABLES = "/apis/brighter.dev/v1alpha1/namespaces/bench/boxtables"


class Api:
    """One keep-alive HTTPS connection with the admin's client certificate."""

    def __init__(self, args, timeout=120):
        parsed = urllib.parse.urlparse(args.server)
        self.host, self.port = parsed.hostname, parsed.port
        self.ctx = ssl.create_default_context(cafile=args.ca)
        self.ctx.load_cert_chain(args.cert, args.key)
        self.timeout = timeout
        self.conn = None

    def connect(self):
        self.conn = http.client.HTTPSConnection(self.host, self.port, context=self.ctx, timeout=self.timeout)

    def call(self, method, path, body=None, content_type="application/json"):
        headers = {"Content-Type": content_type, "Accept": "application/json"}
        for attempt in range(3):
            try:
                if self.conn is None:
                    self.connect()
                self.conn.request(method, path, body=body, headers=headers)
                resp = self.conn.getresponse()
                return resp.status, resp.read()
            except (http.client.HTTPException, OSError):
                if self.conn is not None:
                    self.conn.close()
                self.conn = None
                if attempt == 2:
                    raise
        raise RuntimeError("unreachable")


def expect(status, payload, ok, what):
    if status not in ok:
        sys.exit(f"scale: {what}: HTTP {status}: {payload[:500]!r}")


def post_all(args, path, bodies, threads):
    """POSTs every body to path over `threads` keep-alive connections; returns the seconds taken."""
    local = threading.local()

    def one(body):
        if not hasattr(local, "api"):
            local.api = Api(args)
        status, payload = local.api.call("POST", path, body)
        expect(status, payload, (201, 409), f"POST {path}")

    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        for f in concurrent.futures.as_completed([pool.submit(one, b) for b in bodies]):
            f.result()
    return time.monotonic() - started


def namespace(api, name):
    body = json.dumps({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}).encode()
    status, payload = api.call("POST", "/api/v1/namespaces", body)
    expect(status, payload, (201, 409), f"creating namespace {name}")


def boxtable(i, schemas):
    schema = f"s{i % schemas + 1:04d}"
    table = f"t{i // schemas:02d}"
    return json.dumps({
        "apiVersion": "brighter.dev/v1alpha1",
        "kind": "BoxTable",
        "metadata": {"name": f"{schema}-{table}", "namespace": "bench"},
        "spec": {
            "box": "Outbox",
            "schema": schema,
            "table": table,
            "database": {"secretRef": {"name": "bench-db", "key": "connectionString"}},
        },
    }).encode()


def is_ready(obj):
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready":
            return c.get("status") == "True"
    return False


class ReadyWatch(threading.Thread):
    """Watches BoxTables in `bench` from resourceVersion `rv` and records when `count` are Ready."""

    def __init__(self, args, rv, count, path=BOXTABLES):
        super().__init__(daemon=True)
        self.args, self.rv, self.count, self.path = args, rv, count, path
        self.ready = {}
        self.done = threading.Event()
        self.error = None
        self.progress = []
        self.events = 0

    def run(self):
        try:
            self.watch()
        except Exception as e:  # reported by the main thread
            self.error = e
            self.done.set()

    def watch(self):
        api = Api(self.args, timeout=3600)
        api.connect()
        api.conn.request("GET", f"{self.path}?watch=1&resourceVersion={self.rv}&timeoutSeconds=3600",
                         headers={"Accept": "application/json"})
        resp = api.conn.getresponse()
        if resp.status != 200:
            raise RuntimeError(f"watch: HTTP {resp.status}: {resp.read()[:300]!r}")
        buf = b""
        n_ready = 0
        while not self.done.is_set():
            chunk = resp.read1(1 << 16)
            if not chunk:
                raise RuntimeError("watch closed by the server before every BoxTable was Ready")
            buf += chunk
            *lines, buf = buf.split(b"\n")
            for line in lines:
                if not line.strip():
                    continue
                event = json.loads(line)
                self.events += 1
                if event.get("type") == "ERROR":
                    raise RuntimeError(f"watch error: {event.get('object')}")
                obj = event["object"]
                name = obj["metadata"]["name"]
                ready = event["type"] != "DELETED" and is_ready(obj)
                if self.ready.get(name, False) != ready:
                    n_ready += 1 if ready else -1
                self.ready[name] = ready
                if n_ready == self.count and len(self.ready) == self.count:
                    self.ready_at = time.monotonic()
                    self.done.set()
                    break
            self.progress.append((time.monotonic(), n_ready))
        resp.close()


def vm_hwm_kib(pid):
    return proc_status_kib(pid).get("VmHWM", 0)


def proc_status_kib(pid):
    """The sizes (KiB) in /proc/<pid>/status: VmHWM, VmRSS, RssAnon, RssFile and the others."""
    out = {}
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        for line in f:
            key, _, value = line.partition(":")
            if value.strip().endswith("kB"):
                out[key] = int(value.split()[0])
    return out


def cpu_seconds():
    """CPU seconds (user + system) used so far by the processes on this machine, by program:
    kube-apiserver, etcd, kube-controller-manager, boxtable-operator, postgres (the postgres
    processes alive now: a backend that already exited is not counted) and the rest."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
                stat = f.read()
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv0 = f.read().split(b"\0")[0].decode(errors="replace")
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        used = (int(fields[11]) + int(fields[12])) / tick
        name = os.path.basename(argv0) or stat[stat.index("(") + 1:stat.rindex(")")]
        if name.startswith("postgres"):
            name = "postgres"
        elif name not in ("kube-apiserver", "etcd", "kube-controller-manager", "boxtable-operator"):
            name = "other"
        out[name] = out.get(name, 0) + used
    return out


def cpu_between(before, after):
    return {k: round(after.get(k, 0) - before.get(k, 0), 1) for k in sorted(after)
            if after.get(k, 0) - before.get(k, 0) >= 0.05}


def metrics(url):
    try:
        with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
            return r.read().decode()
    except OSError:
        return ""


def metric_sum(text, name, labels=""):
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and (line[len(name)] in " {") and labels in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def sessions_metric(text):
    """The operator's own count of the database sessions it opened (boxtable_db_sessions_opened_total)."""
    name = "boxtable_db_sessions_opened_total"
    return metric_sum(text, name) if name in text else None


def sessions(args):
    """Sessions ever opened on the databases named in args.database (and args.dev_database)."""
    names = ", ".join(f"'{n}'" for n in (args.database, getattr(args, "dev_database", None)) if n)
    out = subprocess.run(
        [args.psql, "-X", "-tA", "-d", args.admin_url, "-c",
         f"SELECT coalesce(sum(sessions), 0) FROM pg_stat_database WHERE datname IN ({names})"],
        check=True, capture_output=True, text=True).stdout.strip()
    return int(out or 0)


def audit_size(args):
    return os.path.getsize(args.audit_log)


def operator_events(args, start, end):
    """The operator's audit events between two offsets of the audit log."""
    with open(args.audit_log, "rb") as f:
        f.seek(start)
        data = f.read(end - start)
    for line in data.splitlines():
        try:
            e = json.loads(line)
        except ValueError:
            continue
        if (e.get("user") or {}).get("username") == args.operator_user:
            yield e


def audit_between(args, start, end):
    """The operator's requests between two offsets of the audit log, by verb and resource."""
    by = {}
    for e in operator_events(args, start, end):
        ref = e.get("objectRef") or {}
        what = ref.get("resource", e.get("requestURI", "?"))
        if ref.get("subresource"):
            what += "/" + ref["subresource"]
        key = f"{e.get('verb')} {what}"
        by[key] = by.get(key, 0) + 1
    return by


def status_write_objects(args, start, end):
    """The operator's status writes between two offsets of the audit log, by object name."""
    names = {}
    for e in operator_events(args, start, end):
        ref = e.get("objectRef") or {}
        if ref.get("subresource") == "status" and e.get("verb") in ("patch", "update"):
            names[ref.get("name", "?")] = names.get(ref.get("name", "?"), 0) + 1
    return names


def status_writes(by):
    return sum(n for k, n in by.items() if k.split(" ")[0] in ("patch", "update") and k.endswith("/status"))


RUNNING = []


def percentile(values, q):
    """The q-th percentile (0..100) by nearest rank."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered) + 0.5) - 1))]


def audit_rates(args, start, end):
    """The operator's peak requests per second and per 10 s between two offsets of the audit log
    (by requestReceivedTimestamp), and how many seconds they spread over."""
    per_second = {}
    for e in operator_events(args, start, end):
        if e.get("stage") != "ResponseComplete":
            continue
        second = (e.get("requestReceivedTimestamp") or "")[:19]
        per_second[second] = per_second.get(second, 0) + 1
    if not per_second:
        return {"peak_per_second": 0, "peak_per_10s": 0, "seconds": 0}
    counts = [per_second[k] for k in sorted(per_second)]
    stamps = sorted(datetime.datetime.fromisoformat(k) for k in per_second)
    by_ten = {}
    for k, n in per_second.items():
        t = int(datetime.datetime.fromisoformat(k).timestamp()) // 10
        by_ten[t] = by_ten.get(t, 0) + n
    return {"peak_per_second": max(counts), "peak_per_10s": max(by_ten.values()),
            "seconds": (stamps[-1] - stamps[0]).total_seconds() + 1}


class FirstReady(threading.Thread):
    """Watches BoxTables in `bench` from resourceVersion `rv` and records when each named one is
    first seen Ready."""

    def __init__(self, args, rv):
        super().__init__(daemon=True)
        self.args, self.rv = args, rv
        self.ready_at = {}
        self.stop = threading.Event()
        self.error = None

    def run(self):
        try:
            api = Api(self.args, timeout=3600)
            api.connect()
            api.conn.request("GET", f"{BOXTABLES}?watch=1&resourceVersion={self.rv}&timeoutSeconds=3600",
                             headers={"Accept": "application/json"})
            resp = api.conn.getresponse()
            buf = b""
            while not self.stop.is_set():
                chunk = resp.read1(1 << 16)
                if not chunk:
                    raise RuntimeError("watch closed by the server")
                buf += chunk
                *lines, buf = buf.split(b"\n")
                now = time.monotonic()
                for line in lines:
                    if line.strip():
                        obj = json.loads(line)["object"]
                        name = obj["metadata"]["name"]
                        if name not in self.ready_at and is_ready(obj):
                            self.ready_at[name] = now
        except Exception as e:  # reported by the caller
            self.error = e


def new_boxtables(args, api, prefix, count):
    """Creates `count` BoxTables one by one, --new-gap seconds apart, and returns the seconds from
    each POST to its Ready (as a watch sees it); fails after --timeout."""
    status, body = api.call("GET", f"{BOXTABLES}?limit=1")
    expect(status, body, (200,), "listing boxtables")
    watch = FirstReady(args, json.loads(body)["metadata"]["resourceVersion"])
    watch.start()
    posted = {}
    first = time.monotonic()
    for i in range(count):
        time.sleep(max(0.0, first + i * args.new_gap - time.monotonic()))
        schema = f"s{i % args.schemas + 1:04d}"
        name = f"{schema}-{prefix}{i:03d}"
        bt = json.dumps({
            "apiVersion": "brighter.dev/v1alpha1", "kind": "BoxTable",
            "metadata": {"name": name, "namespace": "bench"},
            "spec": {"box": "Outbox", "schema": schema, "table": f"{prefix}{i:03d}",
                     "database": {"secretRef": {"name": "bench-db", "key": "connectionString"}}},
        }).encode()
        posted[name] = time.monotonic()
        status, payload = api.call("POST", BOXTABLES, bt)
        expect(status, payload, (201,), f"POST {name}")
    deadline = time.monotonic() + args.timeout

    def ready():
        # The watch sees every BoxTable's status writes, older ones' too: count only these.
        return sum(1 for n in posted if n in watch.ready_at)

    while ready() < count and time.monotonic() < deadline and watch.error is None:
        time.sleep(0.1)
    watch.stop.set()
    if watch.error:
        sys.exit(f"scale: {watch.error}")
    if ready() < count:
        sys.exit(f"scale: only {ready()}/{count} new BoxTables Ready after {args.timeout:.0f}s")
    waits = [watch.ready_at[n] - posted[n] for n in posted]
    return {"count": count, "gap_seconds": args.new_gap, "p50": percentile(waits, 50),
            "p95": percentile(waits, 95), "max": max(waits), "first_ten": [round(w, 2) for w in waits[:10]]}


def list_all(api, path):
    """Every item of a LIST, 500 at a time."""
    items, cont = [], ""
    while True:
        status, body = api.call("GET", f"{path}?limit=500" + (f"&continue={urllib.parse.quote(cont)}" if cont else ""))
        expect(status, body, (200,), f"listing {path}")
        page = json.loads(body)
        items += page["items"]
        cont = page["metadata"].get("continue")
        if not cont:
            return items


def api_floor(args, objects):
    """The API writes the operator must make for each new BoxTable, and nothing else: one status
    write (server-side apply of the status it wrote, under its field manager, with one word of
    the Ready message changed so that the API server stores it) and one Event, over --threads
    keep-alive connections, as fast as the API server takes them. Returns the seconds taken."""
    local = threading.local()

    def one(obj):
        if not hasattr(local, "api"):
            local.api = Api(args)
        name = obj["metadata"]["name"]
        status = json.loads(json.dumps(obj.get("status") or {}))
        for c in status.get("conditions") or []:
            if c.get("type") == "Ready":
                c["message"] = (c.get("message") or "") + " (floor)"
        apply = json.dumps({"apiVersion": "brighter.dev/v1alpha1", "kind": "BoxTable",
                            "metadata": {"name": name, "namespace": "bench"}, "status": status}).encode()
        code, payload = local.api.call(
            "PATCH", f"{BOXTABLES}/{name}/status?fieldManager=boxtable-operator&force=true", apply,
            content_type="application/apply-patch+yaml")
        expect(code, payload, (200,), f"status of {name}")
        now = datetime.datetime.now(datetime.timezone.utc)
        event = json.dumps({
            "apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": f"{name}.floor{time.monotonic_ns():x}", "namespace": "bench"},
            "eventTime": now.strftime("%Y-%m-%dT%H:%M:%S.%fZ"), "type": "Normal", "reason": "Migrated",
            "action": "Migrate", "note": f"migrated bench/{name} from version 0 to 8 (floor)",
            "regarding": {"apiVersion": "brighter.dev/v1alpha1", "kind": "BoxTable", "name": name,
                          "namespace": "bench", "uid": obj["metadata"]["uid"]},
            "reportingController": "boxtable-operator", "reportingInstance": "floor",
        }).encode()
        code, payload = local.api.call("POST", "/apis/events.k8s.io/v1/namespaces/bench/events", event)
        expect(code, payload, (201,), f"event of {name}")

    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(args.threads) as pool:
        for f in concurrent.futures.as_completed([pool.submit(one, o) for o in objects]):
            f.result()
    return time.monotonic() - started


def psql_floor(args, count, schemas):
    """The DDL the operator runs for `count` new outboxes (--ddl-template, each table in its own
    transaction), by --floor-concurrency psql processes at once on a fresh database with the same
    schemas. Returns the seconds taken."""
    template = "\n".join(l for l in open(args.ddl_template, encoding="utf-8").read().splitlines()
                         if not l.startswith("--")) + "\n"
    database = f"{args.database}_floor"
    admin = [args.psql, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", args.admin_url]
    subprocess.run(admin + ["-c", f"DROP DATABASE IF EXISTS {database} WITH (FORCE)", "-c", f"CREATE DATABASE {database}"],
                   check=True)
    url = args.admin_url.rsplit("/", 1)[0] + "/" + database
    subprocess.run([args.psql, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", url, "-c",
                    "".join(f"CREATE SCHEMA s{i:04d};" for i in range(1, schemas + 1))], check=True)
    n = args.floor_concurrency
    files = [os.path.join(args.workdir, f"floor-{k}.sql") for k in range(n)]
    outs = [open(f, "w", encoding="utf-8") for f in files]
    for i in range(count):
        schema, table = f"s{i % schemas + 1:04d}", f"t{i // schemas:02d}"
        ddl = template.replace("@SCHEMA@", schema).replace('"outbox"', f'"{table}"').replace(
            "idx_outbox_", f"idx_{table}_")
        outs[i % n].write("BEGIN;\n" + ddl + "COMMIT;\n")
    for f in outs:
        f.close()
    started = time.monotonic()
    procs = [subprocess.Popen([args.psql, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", url, "-f", f]) for f in files]
    codes = [p.wait() for p in procs]
    took = time.monotonic() - started
    if any(codes):
        sys.exit(f"scale: the psql floor failed: {codes}")
    made = subprocess.run([args.psql, "-X", "-tA", "-d", url, "-c",
                           "SELECT count(*) FROM pg_tables WHERE schemaname LIKE 's%'"],
                          check=True, capture_output=True, text=True).stdout.strip()
    if int(made) != count:
        sys.exit(f"scale: the psql floor made {made} tables, not {count}")
    subprocess.run(admin + ["-c", f"DROP DATABASE {database} WITH (FORCE)"], check=True)
    return took


class Operator:
    """The operator as a child process in its own process group (stopped on any exit)."""

    def __init__(self, args, log):
        RUNNING.append(self)
        self.args = args
        self.log = open(log, "wb")
        self.started = time.monotonic()
        self.proc = subprocess.Popen(args.operator_cmd, shell=True, stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)

    def wait_ready(self, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                sys.exit(f"scale: the operator exited with {self.proc.returncode} (see its log)")
            try:
                with urllib.request.urlopen(self.args.metrics + "/readyz", timeout=5) as r:
                    if r.status == 200:
                        return time.monotonic() - self.started
            except OSError:
                pass
            time.sleep(0.1)
        sys.exit("scale: the operator never became ready")

    def alive(self):
        return self.proc.poll() is None

    def metrics(self):
        return metrics(self.args.metrics)

    def figures(self):
        """Peak memory (KiB) and what else this process reports about itself."""
        return {"peak_rss_kib": vm_hwm_kib(self.proc.pid)}

    def stop(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.log.close()


class PodOperator:
    """The operator as the Pods of a Deployment on the node: started by scaling it to
    --replicas, stopped by scaling it to 0; the leader (the Lease's holder) is the one measured."""

    def __init__(self, args, log):
        self.args, self.log = args, log
        self.api = Api(args)
        self.started = time.monotonic()
        self.leader = None
        self.kubectl("scale", f"deployment/{args.deployment}", f"--replicas={args.replicas}")

    def kubectl(self, *argv, json_out=False):
        cmd = [self.args.kubectl, "--kubeconfig", self.args.kubeconfig, "-n", self.args.pod_namespace, *argv]
        if json_out:
            cmd += ["-o", "json"]
        out = subprocess.run(cmd, capture_output=True, text=True)
        if out.returncode != 0:
            sys.exit(f"scale: {' '.join(argv)}: {out.stderr.strip()}")
        return json.loads(out.stdout) if json_out else out.stdout

    def pods(self):
        return [p for p in self.kubectl("get", "pods", "-l", self.args.pod_selector, json_out=True)["items"]
                if not p["metadata"].get("deletionTimestamp")]

    def holder(self):
        spec = self.kubectl("get", "lease", self.args.deployment, json_out=True).get("spec") or {}
        return spec.get("holderIdentity") or ""

    def wait_ready(self, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pods = self.pods()
            ready = [p for p in pods if any(c.get("type") == "Ready" and c.get("status") == "True"
                                             for c in (p.get("status") or {}).get("conditions") or [])]
            holder = self.holder() if len(ready) == self.args.replicas else ""
            leader = next((p for p in ready if p["metadata"]["name"] == holder), None)
            if leader is not None:
                self.leader = leader
                status, _ = self.proxy("readyz")
                if status == 200:
                    self.pid = self.find_pid(leader["metadata"]["uid"])
                    self.cgroups = {c: cgroup_dir(self.pid, c) for c in ("memory", "cpuacct")}
                    self.cpu_start = self.cpu_seconds()
                    return time.monotonic() - self.started
            time.sleep(0.2)
        sys.exit("scale: the operator's Pods never became ready with a leader")

    def proxy(self, path):
        name = self.leader["metadata"]["name"]
        try:
            return self.api.call("GET", f"/api/v1/namespaces/{self.args.pod_namespace}/pods/{name}:8080/proxy/{path}")
        except OSError:
            return 0, b""

    @staticmethod
    def find_pid(uid):
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmdline = f.read()
                with open(f"/proc/{pid}/cgroup", encoding="ascii") as f:
                    cgroup = f.read()
            except OSError:
                continue
            if cmdline.startswith(b"/boxtable-operator\0") and f"pod{uid}" in cgroup:
                return int(pid)
        sys.exit(f"scale: no operator process in Pod {uid} on this host")

    def alive(self):
        return True

    def mark(self):
        """Starts the count of the leader's CPU time from now."""
        self.cpu_start = self.cpu_seconds()

    def metrics(self):
        status, body = self.proxy("metrics")
        return body.decode() if status == 200 else ""

    def cpu_seconds(self):
        return read_int(os.path.join(self.cgroups["cpuacct"], "cpuacct.usage")) / 1e9

    def figures(self):
        memory = self.cgroups["memory"]
        oom = {}
        with open(os.path.join(os.path.dirname(memory), "memory.oom_control"), encoding="ascii") as f:
            for line in f:
                key, value = line.split()
                oom[key] = int(value)
        restarts = {p["metadata"]["name"]: [(c.get("restartCount", 0),
                                             ((c.get("lastState") or {}).get("terminated") or {}).get("reason"))
                                            for c in (p.get("status") or {}).get("containerStatuses") or []]
                    for p in self.pods()}
        sizes = proc_status_kib(self.pid)
        return {
            "peak_rss_kib": sizes.get("VmHWM", 0),
            # The resident set now, split: the heap and stacks, and the binary's pages.
            "rss_now_kib": {k: sizes.get(k, 0) for k in ("VmRSS", "RssAnon", "RssFile")},
            "cgroup_peak_bytes": read_int(os.path.join(memory, "memory.max_usage_in_bytes")),
            "cgroup_limit_bytes": read_int(os.path.join(memory, "memory.limit_in_bytes")),
            "cgroup_failcnt": read_int(os.path.join(memory, "memory.failcnt")),
            "oom_kills": oom.get("oom_kill", 0),
            "restarts": restarts,
            "leader_cpu_seconds": round(self.cpu_seconds() - self.cpu_start, 2),
        }

    def stop(self):
        self.kubectl("scale", f"deployment/{self.args.deployment}", "--replicas=0")
        deadline = time.monotonic() + 120
        while self.pods_left() and time.monotonic() < deadline:
            time.sleep(0.5)

    def pods_left(self):
        return self.kubectl("get", "pods", "-l", self.args.pod_selector, json_out=True)["items"]


def read_int(path):
    with open(path, encoding="ascii") as f:
        return int(f.read().strip())


def cgroup_dir(pid, controller):
    """The directory of process pid's cgroup (v1) of `controller`, as this host sees it."""
    with open(f"/proc/{pid}/cgroup", encoding="ascii") as f:
        for line in f:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            if controller in controllers.split(","):
                mount = next(m for m in os.listdir("/sys/fs/cgroup") if controller in m.split(","))
                return os.path.join("/sys/fs/cgroup", mount, path.lstrip("/"))
    sys.exit(f"scale: process {pid} is in no {controller} cgroup")


def start_operator(args, log):
    return PodOperator(args, log) if args.pod else Operator(args, log)


def stop_running():
    for op in RUNNING:
        if op.proc.poll() is None:
            os.killpg(op.proc.pid, signal.SIGKILL)
            op.proc.wait()


def install_signal_handlers():
    def stop(*_):
        stop_running()
        sys.exit(143)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGHUP, stop)


def main():
    ap = argparse.ArgumentParser()
    for a in ("server", "ca", "cert", "key", "audit-log", "operator-user",
              "database-url", "psql", "admin-url", "database", "json", "workdir"):
        ap.add_argument("--" + a, required=True)
    ap.add_argument("--operator-cmd")
    ap.add_argument("--metrics")
    ap.add_argument("--pod", action="store_true")
    ap.add_argument("--kubectl")
    ap.add_argument("--kubeconfig")
    ap.add_argument("--pod-namespace", default="boxtable-system")
    ap.add_argument("--deployment", default="boxtable-operator")
    ap.add_argument("--pod-selector", default="app.kubernetes.io/name=boxtable-operator")
    ap.add_argument("--replicas", type=int, default=2)
    ap.add_argument("--new", type=int, default=0)
    ap.add_argument("--new-gap", type=float, default=1.0)
    ap.add_argument("--count", type=int, default=10000)
    ap.add_argument("--schemas", type=int, default=1000)
    ap.add_argument("--secrets", type=int, default=2000)
    ap.add_argument("--secret-kib", type=int, default=200)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--ddl-template", help="with it, the floor runs once the operator has stopped")
    ap.add_argument("--floor-concurrency", type=int, default=4, help="psql processes: the operator's workers")
    args = ap.parse_args()
    api = Api(args)
    out = {"count": args.count, "schemas": args.schemas, "secrets": args.secrets, "secret_kib": args.secret_kib}

    namespace(api, "bench")
    namespace(api, "bench-noise")
    secret = json.dumps({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "bench-db", "namespace": "bench"},
                         "stringData": {"connectionString": args.database_url}}).encode()
    status, body = api.call("POST", "/api/v1/namespaces/bench/secrets", secret)
    expect(status, body, (201,), "creating secret bench-db")
    blob = base64.b64encode(os.urandom(args.secret_kib * 1024)).decode()
    noise = [json.dumps({"apiVersion": "v1", "kind": "Secret",
                         "metadata": {"name": f"noise-{i:05d}", "namespace": "bench-noise"},
                         "data": {"blob": blob}}).encode() for i in range(args.secrets)]
    out["secrets_post_seconds"] = post_all(args, "/api/v1/namespaces/bench-noise/secrets", noise, args.threads)
    del noise
    sys.stderr.write(f"  {args.secrets} Secrets of {args.secret_kib} KiB POSTed in {out['secrets_post_seconds']:.1f}s\n")

    # ---- convergence
    sessions_before = sessions(args)
    op = start_operator(args, os.path.join(args.workdir, "operator-1.log"))
    out["operator_ready_seconds"] = op.wait_ready(120)
    status, body = api.call("GET", f"{BOXTABLES}?limit=1")
    expect(status, body, (200,), "listing boxtables")
    rv = json.loads(body)["metadata"]["resourceVersion"]
    watch = ReadyWatch(args, rv, args.count)
    watch.start()
    bodies = [boxtable(i, args.schemas) for i in range(args.count)]
    audit_start = audit_size(args)
    cpu_start = cpu_seconds()
    if hasattr(op, "mark"):
        op.mark()
    started = time.monotonic()
    out["boxtables_post_seconds"] = post_all(args, BOXTABLES, bodies, args.threads)
    sys.stderr.write(f"  {args.count} BoxTables POSTed in {out['boxtables_post_seconds']:.1f}s\n")
    if not watch.done.wait(args.timeout):
        n = sum(watch.ready.values())
        op.stop()
        sys.exit(f"scale: only {n}/{args.count} Ready after {args.timeout:.0f}s")
    if watch.error:
        op.stop()
        sys.exit(f"scale: {watch.error}")
    out["converge_seconds"] = watch.ready_at - started
    out["cpu_seconds"] = cpu_between(cpu_start, cpu_seconds())
    out["ready_at_last_post"] = next((n for t, n in reversed(watch.progress)
                                      if t <= started + out["boxtables_post_seconds"]), 0)
    text = op.metrics()
    figures = op.figures()
    out["peak_rss_kib"] = figures.pop("peak_rss_kib")
    out["converge_figures"] = figures
    out["operator_cpu_ms_per_boxtable"] = (
        figures["leader_cpu_seconds"] if "leader_cpu_seconds" in figures
        else out["cpu_seconds"].get("boxtable-operator", 0)) * 1000 / args.count
    out["sessions_metric"] = sessions_metric(text)
    out["reconciles"] = metric_sum(text, "boxtable_reconciles_total")
    audit_end = audit_size(args)
    out["watch_events"] = watch.events
    out["progress"] = [(round(t - started, 1), n) for t, n in watch.progress[:: max(1, len(watch.progress) // 30)]]
    if args.new:
        out["new_while_resyncing"] = new_boxtables(args, api, "n", args.new)
        sys.stderr.write(f"  {args.new} new BoxTables in the resyncing fleet: {json.dumps(out['new_while_resyncing'])}\n")
    op.stop()
    by = audit_between(args, audit_start, audit_end)
    out["operator_requests_by_verb"] = by
    out["operator_requests"] = sum(by.values())
    out["requests_per_boxtable"] = out["operator_requests"] / args.count
    out["status_writes"] = status_writes(by)
    out["sessions_opened"] = sessions(args) - sessions_before
    sys.stderr.write(
        f"  {args.count} BoxTables Ready in {out['converge_seconds']:.1f}s, peak RSS {out['peak_rss_kib'] / 1024:.1f} MiB, "
        f"{out['requests_per_boxtable']:.2f} requests/BoxTable, {out['sessions_opened']} sessions opened\n"
        f"  CPU seconds while converging, by program: {json.dumps(out['cpu_seconds'])}\n"
        f"  operator: {out['operator_cpu_ms_per_boxtable']:.2f} ms CPU per BoxTable; {json.dumps(out['converge_figures'])}\n"
        f"  by verb: {json.dumps(by, sort_keys=True)}\n")

    # ---- no-op resync: a restart, so every object gets one pass
    sessions_before = sessions(args)
    audit_start = audit_size(args)
    op = start_operator(args, os.path.join(args.workdir, "operator-2.log"))
    out["resync_ready_seconds"] = op.wait_ready(120)
    resync_new = None
    if args.new:
        creating = concurrent.futures.ThreadPoolExecutor(1)
        resync_new = creating.submit(new_boxtables, args, Api(args), "r", args.new)
    deadline = time.monotonic() + args.timeout
    timeline = []
    while True:
        text = op.metrics()
        passes = metric_sum(text, "boxtable_reconciles_total") - (args.new if args.new else 0)
        timeline.append((round(time.monotonic() - op.started, 1), passes))
        if passes >= args.count:
            break
        if time.monotonic() > deadline or not op.alive():
            op.stop()
            sys.exit(f"scale: the resync made only {passes:.0f}/{args.count} passes")
        time.sleep(0.25 if not args.pod else 1)
    out["resync_seconds"] = time.monotonic() - op.started
    out["resync_timeline"] = timeline[:: max(1, len(timeline) // 30)]
    if resync_new is not None:
        out["new_after_restart"] = resync_new.result()
        sys.stderr.write(f"  {args.new} new BoxTables right after the restart: {json.dumps(out['new_after_restart'])}\n")
    out["resync_passes"] = passes
    out["resync_results"] = {k: metric_sum(text, "boxtable_reconciles_total", f'result="{k}"')
                             for k in ("success", "retry", "stalled")}
    figures = op.figures()
    out["resync_peak_rss_kib"] = figures.pop("peak_rss_kib")
    out["resync_figures"] = figures
    out["resync_sessions_metric"] = sessions_metric(text)
    audit_end = audit_size(args)
    op.stop()
    by = audit_between(args, audit_start, audit_end)
    out["resync_requests_by_verb"] = by
    out["resync_requests"] = sum(by.values())
    out["resync_request_rate"] = audit_rates(args, audit_start, audit_end)
    out["resync_status_writes"] = status_writes(by)
    # Each BoxTable created during the resync owes one status write; list every other one by name.
    def owed(name):
        # The BoxTables new_boxtables created during the resync are named SCHEMA-rNNN.
        return 1 if name.split("-", 1)[-1].startswith("r") else 0

    written = status_write_objects(args, audit_start, audit_end)
    out["resync_status_writes_beyond_new"] = {
        n: c - owed(n) for n, c in written.items() if c > owed(n)}
    out["resync_sessions_opened"] = sessions(args) - sessions_before
    sys.stderr.write(
        f"  no-op resync (restart): {passes:.0f} passes in {out['resync_seconds']:.1f}s from process start, "
        f"{out['resync_status_writes']} status writes, {out['resync_sessions_opened']} sessions, "
        f"peak RSS {out['resync_peak_rss_kib'] / 1024:.1f} MiB, requests {json.dumps(out['resync_request_rate'])}\n"
        f"  {json.dumps(out['resync_figures'])}\n  by verb: {json.dumps(by, sort_keys=True)}\n"
        f"  status writes beyond one per new BoxTable: {json.dumps(out['resync_status_writes_beyond_new'])}\n")

    # ---- the floor: the same API writes and the same DDL, with no operator
    if args.ddl_template:
        objects = [o for o in list_all(api, BOXTABLES) if is_ready(o)][: args.count]
        out["floor_api_seconds"] = api_floor(args, objects)
        out["floor_api_objects"] = len(objects)
        out["floor_psql_seconds"] = psql_floor(args, args.count, args.schemas)
        out["floor_threads"], out["floor_concurrency"] = args.threads, args.floor_concurrency
        sys.stderr.write(
            f"  floor: {len(objects)} status writes + Events over {args.threads} connections in "
            f"{out['floor_api_seconds']:.1f}s; the DDL of {args.count} tables by {args.floor_concurrency} psql in "
            f"{out['floor_psql_seconds']:.1f}s; operator {out['converge_seconds']:.1f}s = "
            f"{out['converge_seconds'] / max(out['floor_api_seconds'], out['floor_psql_seconds']):.2f}x the slower\n")
    with open(args.json, "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    install_signal_handlers()
    try:
        main()
    finally:
        stop_running()
