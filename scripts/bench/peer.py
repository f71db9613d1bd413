#!/usr/bin/env python3
"""Benchmark item 8: a peer operator side by side on the same kube-apiserver and database.

    peer.py --kind atlas|boxtable --count N --operator-cmd CMD --operator-user USER \
        --server URL --ca --cert --key --audit-log FILE --ddl outbox_v8.sql.in \
        --pg-host H --pg-port P --pg-password PW --database NAME --dev-database NAME \
        --metrics URL --psql PSQL --admin-url URL --workdir DIR --json out.json

Creates namespace `peer-KIND` and a Secret with the database password (and, for Atlas, its dev
database URL), starts the operator, waits for its readiness, opens a watch on the custom
resources, then POSTs N of them: for Atlas an `AtlasSchema` (db.atlasgo.io/v1alpha1) whose desired
schema is the outbox V8 DDL in schema `aNNNN` (schema-scoped URL, so the DDL's schema qualifier is
left out); for boxtable-operator a `BoxTable` outbox in schema `oNNNN`. The clock starts before the
first POST and stops when the watch shows every resource's Ready condition True. Then it reads the
operator process's VmHWM and counts the operator's requests in the audit log.
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import scale  # noqa: E402


def atlas_schema(i, args, ddl):
    schema = f"a{i + 1:04d}"
    return json.dumps({
        "apiVersion": "db.atlasgo.io/v1alpha1",
        "kind": "AtlasSchema",
        "metadata": {"name": f"outbox-{schema}", "namespace": args.namespace},
        "spec": {
            "credentials": {
                "scheme": "postgres", "user": "postgres",
                "passwordFrom": {"secretKeyRef": {"name": "peer-db", "key": "password"}},
                "host": args.pg_host, "port": args.pg_port, "database": args.database,
                "parameters": {"search_path": schema, "sslmode": "disable"},
            },
            "devURLFrom": {"secretKeyRef": {"name": "peer-db", "key": "devURL"}},
            "schema": {"sql": ddl},
        },
    }).encode()


def boxtable(i, args):
    schema = f"o{i + 1:04d}"
    return json.dumps({
        "apiVersion": "brighter.dev/v1alpha1",
        "kind": "BoxTable",
        "metadata": {"name": f"outbox-{schema}", "namespace": args.namespace},
        "spec": {"box": "Outbox", "schema": schema, "table": "outbox",
                 "database": {"secretRef": {"name": "peer-db", "key": "connectionString"}}},
    }).encode()


def conditions(api, path):
    """How many resources show each (status, reason, message) of their Ready condition."""
    status, body = api.call("GET", path)
    seen = {}
    if status != 200:
        return {"list failed": status}
    for item in json.loads(body)["items"]:
        ready = [c for c in (item.get("status") or {}).get("conditions") or [] if c.get("type") == "Ready"]
        key = " / ".join(str(ready[0].get(k)) for k in ("status", "reason", "message")) if ready else "no Ready condition"
        seen[key] = seen.get(key, 0) + 1
    return seen


def main():
    ap = argparse.ArgumentParser()
    for a in ("kind", "server", "ca", "cert", "key", "audit-log", "operator-user", "operator-cmd", "ddl",
              "pg-host", "pg-password", "database", "dev-database", "psql", "admin-url", "workdir", "json"):
        ap.add_argument("--" + a, required=True)
    ap.add_argument("--metrics", default="")
    ap.add_argument("--pg-port", type=int, required=True)
    ap.add_argument("--count", type=int, default=20)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--timeout", type=float, default=600)
    args = ap.parse_args()
    args.namespace = f"peer-{args.kind}"
    if args.kind == "atlas":
        path = f"/apis/db.atlasgo.io/v1alpha1/namespaces/{args.namespace}/atlasschemas"
    else:
        path = f"/apis/brighter.dev/v1alpha1/namespaces/{args.namespace}/boxtables"
    api = scale.Api(args)
    scale.namespace(api, args.namespace)
    base = f"postgres://postgres:{args.pg_password}@{args.pg_host}:{args.pg_port}"
    secret = json.dumps({
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "peer-db", "namespace": args.namespace},
        "stringData": {"password": args.pg_password,
                       "devURL": f"{base}/{args.dev_database}?search_path=public&sslmode=disable",
                       "connectionString": f"{base}/{args.database}"},
    }).encode()
    status, body = api.call("POST", f"/api/v1/namespaces/{args.namespace}/secrets", secret)
    scale.expect(status, body, (201,), "creating secret peer-db")
    template = "\n".join(line for line in open(args.ddl, encoding="utf-8").read().splitlines()
                         if not line.startswith("--")) + "\n"
    if args.kind == "atlas":
        ddl = template.replace('"@SCHEMA@".', "")
        bodies = [atlas_schema(i, args, ddl) for i in range(args.count)]
    else:
        bodies = [boxtable(i, args) for i in range(args.count)]

    out = {"kind": args.kind, "count": args.count}
    sessions_before = scale.sessions(args)
    op = scale.Operator(args, os.path.join(args.workdir, f"peer-{args.kind}.log"))
    if args.metrics:
        out["operator_ready_seconds"] = op.wait_ready(120)
    status, body = api.call("GET", f"{path}?limit=1")
    scale.expect(status, body, (200,), f"listing {path}")
    rv = json.loads(body)["metadata"]["resourceVersion"]
    watch = scale.ReadyWatch(args, rv, args.count, path)
    watch.start()
    audit_start = scale.audit_size(args)
    started = time.monotonic()
    out["post_seconds"] = scale.post_all(args, path, bodies, args.threads)
    if not watch.done.wait(args.timeout) or watch.error:
        n = sum(watch.ready.values())
        out["peak_rss_kib"] = scale.vm_hwm_kib(op.proc.pid) if op.proc.poll() is None else 0
        audit_end = scale.audit_size(args)
        op.stop()
        by = scale.audit_between(args, audit_start, audit_end)
        out.update(failed=True, ready=n, waited_seconds=time.monotonic() - started,
                   watch_error=str(watch.error or ""), conditions=conditions(api, path),
                   operator_requests_by_verb=by, operator_requests=sum(by.values()))
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(out, f, indent=1)
        sys.exit(f"peer: {args.kind}: {n}/{args.count} Ready after {out['waited_seconds']:.0f}s; their Ready "
                 f"conditions: {json.dumps(out['conditions'])}; see {args.workdir}/peer-{args.kind}.log")
    out["converge_seconds"] = watch.ready_at - started
    out["peak_rss_kib"] = scale.vm_hwm_kib(op.proc.pid)
    audit_end = scale.audit_size(args)
    op.stop()
    by = scale.audit_between(args, audit_start, audit_end)
    out["operator_requests_by_verb"] = by
    out["operator_requests"] = sum(by.values())
    out["requests_per_resource"] = out["operator_requests"] / args.count
    out["sessions_opened"] = scale.sessions(args) - sessions_before
    sys.stderr.write(
        f"  {args.kind}: {args.count} Ready in {out['converge_seconds']:.1f}s, peak RSS "
        f"{out['peak_rss_kib'] / 1024:.1f} MiB, {out['requests_per_resource']:.2f} requests each, "
        f"{out['sessions_opened']} sessions\n  by verb: {json.dumps(by, sort_keys=True)}\n")
    with open(args.json, "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    scale.install_signal_handlers()
    try:
        main()
    finally:
        scale.stop_running()
