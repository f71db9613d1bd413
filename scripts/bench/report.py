#!/usr/bin/env python3
"""Prints the one benchmark table (Markdown) from scripts/bench.sh's results directory.

    report.py target/bench-results [target/criterion]

Ratios are ours / baseline from the same run; medians throughout. Missing inputs show as "n/a".
"""
import json
import os
import statistics
import sys

R = sys.argv[1]
CRITERION = sys.argv[2] if len(sys.argv) > 2 else os.path.join(os.path.dirname(R), "criterion")
ROWS = []
NOTES = []


def load(name):
    try:
        with open(os.path.join(R, name), encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def criterion_ns(group, bench):
    path = os.path.join(CRITERION, group, bench, "new", "estimates.json")
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)["median"]["point_estimate"]
    except (OSError, ValueError, KeyError):
        return None


def row(item, what, ours, base, ratio, target, result):
    ROWS.append((item, what, ours, base, ratio, target, result))


def verdict(ok):
    if ok is None:
        return "n/a"
    return "pass" if ok else "**miss**"


def ms(s):
    return f"{s * 1000:.0f} ms" if s < 10 else f"{s:.1f} s"


def ratio(a, b):
    return f"{a / b:.2f}x" if a is not None and b else "n/a"


def item1():
    py = (load("1-key.json") or {}).get("python_hashlib_ns")
    for bench, what in (
        ("derive_key", "key derivation: SHA-256 of `74726:`+lockKey → i64"),
        ("for_table", "lockKey text from a table name + derivation"),
        ("for_table_hex", "… + 16-digit hex formatting"),
    ):
        ns = criterion_ns("lock_key", bench)
        row(
            "1",
            what,
            f"{ns:.0f} ns" if ns else "n/a",
            f"{py:.0f} ns (Python hashlib)" if py and bench == "derive_key" else "",
            ratio(ns, py) if bench == "derive_key" else "",
            "report ns/key",
            "reported" if ns else "n/a",
        )


def item2():
    pairs = []
    try:
        with open(os.path.join(R, "2-pairs.jsonl"), encoding="utf-8") as f:
            pairs = [json.loads(line) for line in f if line.strip()]
    except (OSError, ValueError):
        pass
    if not pairs:
        return
    everything = [us for p in pairs for us in p["pgbench_us"]]
    pg = statistics.median(everything)
    rounds = len({p["round"] for p in pairs})
    base = f"{pg:.1f} µs (pgbench -M prepared, median of {len(everything)} runs)"
    for variant, what, target in (
        ("crate_api_current_thread",
         "lock round trip (acquire+release, open session): `lock::{acquire,release}`, "
         "current-thread runtime as `migrate` runs it", "≤ 1.1x"),
        ("prepared_current_thread", "… the driver alone: the same statements prepared by the bench",
         "(info)"),
        ("query_typed_current_thread",
         "… the same SQL via `query_typed_one` (unnamed, parsed every time; the previous form)",
         "(info)"),
        ("crate_api", "… `lock::{acquire,release}` on a multi-thread runtime (the controller's)",
         "(info)"),
    ):
        mine = [p for p in pairs if p["variant"] == variant]
        if not mine:
            continue
        us = statistics.median(p["ns"] / 1000 for p in mine)
        # Each measurement against the two pgbench runs either side of it.
        r = statistics.median((p["ns"] / 1000) / statistics.mean(p["pgbench_us"]) for p in mine)
        ok = verdict(r <= 1.1) if target != "(info)" else ""
        row("2", f"{what} (median of {rounds} paired ratios)", f"{us:.1f} µs", base, f"{r:.2f}x",
            target, ok)
    NOTES.append("Item 2, every pgbench -M prepared run (µs, in order): "
                 + " ".join(f"{us:.0f}" for us in everything))


def item3():
    d = load("3-one.json")
    if not d:
        return
    ours, sqlx, psql = (d[k]["median"] for k in ("ours", "sqlx", "psql"))
    n = len(d["ours"]["runs"])
    row("3", f"one outbox V8 from empty, process start→exit (n={n})", ms(ours),
        f"{ms(sqlx)} (sqlx migrate run)", ratio(ours, sqlx), "≤ 1.0x sqlx", verdict(ours <= sqlx))
    row("3", "… vs the floor", ms(ours), f"{ms(psql)} (psql -1 -f)", ratio(ours, psql), "(floor)", "")
    if "ours_prefer" in d:
        prefer = d["ours_prefer"]["median"]
        row("3", "… ours with the default sslmode=prefer (one SSLRequest turn more)", ms(prefer),
            f"{ms(sqlx)} (sqlx migrate run)", ratio(prefer, sqlx), "(info)", "")


def item4():
    d = load("4-bulk.json")
    if not d:
        return
    psql = d["psql"]["median"]
    n = len(d["psql"]["runs"])
    c1 = d["c1"]["median"]
    for c in ("c1", "c2", "c4", "c8"):
        t = d[c]["median"]
        conc = int(c[1:])
        target = "≤ 1.0x psql" if conc >= 4 else "(scaling)"
        result = verdict(t <= psql) if conc >= 4 else ""
        row("4", f"500 outboxes in 500 schemas, `migrate --concurrency {conc}` (n={n}); "
            f"speed-up vs c1 {c1 / t:.2f}x", ms(t), f"{ms(psql)} (serial psql, one session)",
            ratio(t, psql), target, result)


def item5():
    ddl_ok = None
    try:
        with open(os.path.join(R, "5-ddl.sql"), encoding="utf-8") as f:
            ddl = [s.strip() for s in f.read().split(";") if s.strip()]
        fresh = load("5-proxy-ours-fresh.json") or []
        sent = [s.strip().rstrip(";") for c in fresh for s in c["statements"]]
        ddl_ok = all(stmt in sent for stmt in ddl)
    except OSError:
        pass
    ours = load("5-proxy-ours-noop.json")
    sqlx = load("5-proxy-sqlx-noop.json")
    lat = load("5-noop.json")
    if ours:
        # Waited round trips: requests written together (a pipeline) are answered in one.
        q = sum(c["query_turns"] for c in ours)
        s = sum(c["startup_turns"] for c in ours)
        qs = sum(c["query_turns"] for c in sqlx) if sqlx else None
        ss = sum(c["startup_turns"] for c in sqlx) if sqlx else None
        row("5", f"no-op run, up-to-date table: SQL round trips waited on (+ connection start-up) over "
            f"{len(ours)} connection(s)", f"{q} (+{s})",
            f"{qs} (+{ss}) (sqlx no-op)" if sqlx else "n/a", ratio(q, qs), "≤ 6", verdict(q <= 6))
    if lat:
        n = len(lat["ours"]["runs"])
        row("5", f"no-op run, process start→exit (n={n})", ms(lat["ours"]["median"]),
            f"{ms(lat['sqlx']['median'])} (sqlx no-op)", ratio(lat["ours"]["median"], lat["sqlx"]["median"]),
            "report", "reported")
    if ddl_ok is not None:
        row("", "check: psql/sqlx DDL = the statements migrate sent", "", "", "", "identical",
            "pass" if ddl_ok else "**differs**")


def item6():
    for name, where in (("6-scale.json", "operator as a process"),
                        ("6-scale-pod.json", "operator as a Pod of dist/install.yaml on the node")):
        d = load(name)
        if d:
            item6_rows(d, where)


def new_rows(d, key, what):
    n = d.get(key)
    if not n:
        return
    ok = n["p50"] < 0.5 and n["max"] < 2
    row("6", f"… {n['count']} new BoxTables one by one, {n['gap_seconds']:g} s apart, {what}: POST → Ready "
        f"p50 / p95 / max", f"{n['p50']:.2f} / {n['p95']:.2f} / {n['max']:.2f} s", "", "",
        "p50 < 0.5 s, max < 2 s", verdict(ok))


def item6_rows(d, where):
    n = d["count"]
    setup = (f"{d['secrets']} unrelated Secrets × {d['secret_kib']} KiB in the cluster; "
             f"POSTs took {d['boxtables_post_seconds']:.1f} s")
    row("6", f"{n} BoxTables over {d['schemas']} schemas, one database, real kube-apiserver, {where}: POSTed → "
        f"all Ready ({setup})", f"{d['converge_seconds']:.1f} s", "", "", "< 60 s", verdict(d["converge_seconds"] < 60))
    if "ready_at_last_post" in d:
        row("6", "… Ready when the last POST returned", f"{d['ready_at_last_post']}", "", "", "report", "reported")
    mib = d["peak_rss_kib"] / 1024
    row("6", "… operator peak RSS (VmHWM)", f"{mib:.1f} MiB", "", "", "< 64 MiB", verdict(mib < 64))
    fig = d.get("converge_figures") or {}
    if "cgroup_peak_bytes" in fig:
        restarts = sum(c for pod in fig["restarts"].values() for c, _ in pod)
        row("6", "… leader container's memory cgroup peak / shipped limit; failcnt, OOM kills, restarts",
            f"{fig['cgroup_peak_bytes'] / 2**20:.1f} / {fig['cgroup_limit_bytes'] / 2**20:.0f} MiB; "
            f"{fig['cgroup_failcnt']}, {fig['oom_kills']}, {restarts}", "", "", "under the limit; 0 OOM kills, 0 restarts",
            verdict(fig["cgroup_peak_bytes"] <= fig["cgroup_limit_bytes"] and fig["oom_kills"] == 0 and restarts == 0))
    if "operator_cpu_ms_per_boxtable" in d:
        row("6", "… operator CPU per BoxTable" + (" (leader's cgroup, cpuacct.usage)" if "leader_cpu_seconds" in fig
                                                  else " (/proc)"),
            f"{d['operator_cpu_ms_per_boxtable']:.2f} ms", "", "", "≤ 2 ms", verdict(d["operator_cpu_ms_per_boxtable"] <= 2))
    row("6", "… operator API requests per BoxTable (audit log)", f"{d['requests_per_boxtable']:.2f}", "", "",
        "report", "reported")
    metric = d.get("sessions_metric")
    row("6", "… database sessions opened (pg_stat_database.sessions)", f"{d['sessions_opened']}",
        "" if metric is None else f"{metric:.0f} (operator's own metric)", "", "report", "reported")
    if "floor_api_seconds" in d:
        api, ddl = d["floor_api_seconds"], d["floor_psql_seconds"]
        slower = max(api, ddl)
        row("6", f"… against the floor: the same {d['floor_api_objects']} status writes + Events over "
            f"{d['floor_threads']} connections ({api:.1f} s), the same DDL by {d['floor_concurrency']} psql at once "
            f"({ddl:.1f} s); ratio to the slower", f"{d['converge_seconds']:.1f} s", f"{slower:.1f} s (floor)",
            ratio(d["converge_seconds"], slower), "≤ 1.3x", verdict(d["converge_seconds"] <= 1.3 * slower))
    new_rows(d, "new_while_resyncing", "in the Ready fleet while it resyncs at its interval")
    if "resync_seconds" in d:
        row("6", f"no-op resync of all {n} (operator restart: list + one pass each), start → "
            f"{d['resync_passes']:.0f} passes", f"{d['resync_seconds']:.1f} s", "", "", "report", "reported")
        # The BoxTables created during the resync write their own status once each.
        new = (d.get("new_after_restart") or {}).get("count", 0)
        row("6", "… status writes during the resync (audit log)" + (f", the {new} new BoxTables' own among them" if new else ""),
            f"{d['resync_status_writes']}", "", "", f"{new}", verdict(d["resync_status_writes"] == new))
        row("6", "… API requests / sessions opened / peak RSS during the resync",
            f"{d['resync_requests']} / {d['resync_sessions_opened']} / {d['resync_peak_rss_kib'] / 1024:.1f} MiB",
            "", "", "peak RSS < 64 MiB", verdict(d["resync_peak_rss_kib"] / 1024 < 64))
        rate = d.get("resync_request_rate")
        if rate:
            row("6", "… operator API requests during the resync: peak per second / per 10 s",
                f"{rate['peak_per_second']} / {rate['peak_per_10s']}", "", "", "report", "reported")
        rfig = d.get("resync_figures") or {}
        if "cgroup_peak_bytes" in rfig:
            restarts = sum(c for pod in rfig["restarts"].values() for c, _ in pod)
            row("6", "… resync: leader's memory cgroup peak / limit; OOM kills, restarts",
                f"{rfig['cgroup_peak_bytes'] / 2**20:.1f} / {rfig['cgroup_limit_bytes'] / 2**20:.0f} MiB; "
                f"{rfig['oom_kills']}, {restarts}", "", "", "0 OOM kills, 0 restarts",
                verdict(rfig["oom_kills"] == 0 and restarts == 0))
        new_rows(d, "new_after_restart", "right after an operator restart")


def item7():
    d = load("7-contention.json")
    if not d:
        return
    one, many = d["single"]["median"], d["sixteen"]["median"]
    n = len(d["single"]["runs"])
    row("7", f"16 `migrate` at once on one fresh table, all exit 0, one history row (n={n})",
        ms(many), f"{ms(one)} (one alone)", f"+{(many - one) * 1000:.0f} ms",
        "≤ single + 1.5 s", verdict(many <= one + 1.5))


for f in (item1, item2, item3, item4, item5, item6, item7):
    f()
header = ("#", "Measured", "Ours", "Baseline", "Ratio", "Target", "Result")
print("| " + " | ".join(header) + " |")
print("|" + "|".join("---" for _ in header) + "|")
for r in ROWS:
    print("| " + " | ".join(r) + " |")
m = load("machine.json")
if m:
    print(f"\nMachine: {m['nproc']} CPUs ({m['cpu']}), {m['mem_gib']} GiB, kernel {m['kernel']}, "
          f"{m['postgres']}, {m['sqlx']}, {m['rustc']}; load average at start {' '.join(m['loadavg_at_start'])}.")
for label, title in (("ours-noop", "Item 5, `boxtable-operator migrate` on an up-to-date table"),
                     ("sqlx-noop", "Item 5, `sqlx migrate run` on an up-to-date table"),
                     ("ours-fresh", "Items 3 and 4, `boxtable-operator migrate` creating one outbox (what each "
                                    "table of item 4 costs too)"),
                     ("sqlx-fresh", "Item 3, `sqlx migrate run` creating one outbox")):
    conns = load(f"5-proxy-{label}.json")
    if not conns:
        continue
    print(f"\n{title}: what each connection sent")
    for c in conns:
        print(f"- connection {c['id']}: {c['startup_turns']} start-up turns, {c['query_turns']} SQL round trips"
              f" waited on for {c['round_trips']} requests (+{c['close_only_syncs']} Close+Sync not waited on);"
              f" messages `{c['messages']}`")
        for sql in c["statements"]:
            print(f"  - `{' '.join(sql.split())[:160]}`")
for note in NOTES:
    print(f"\n{note}")
for scale in filter(None, (load("6-scale.json"), load("6-scale-pod.json"))):
    print(f"\nItem 6, the operator's requests while converging (audit log, by verb and resource): "
          f"{json.dumps(scale['operator_requests_by_verb'], sort_keys=True)}")
    if "resync_requests_by_verb" in scale:
        print(f"Item 6, during the no-op resync: {json.dumps(scale['resync_requests_by_verb'], sort_keys=True)}; "
              f"pass results {json.dumps(scale.get('resync_results', {}), sort_keys=True)}")
    if "cpu_seconds" in scale:
        print(f"Item 6, CPU seconds used while converging (POSTs to all Ready), by program: "
              f"{json.dumps(scale['cpu_seconds'], sort_keys=True)}")
    print(f"Item 6, setup (untimed): {scale['secrets']} Secrets POSTed in {scale['secrets_post_seconds']:.1f} s; "
          f"Ready count over time (s, Ready): {scale['progress']}")
