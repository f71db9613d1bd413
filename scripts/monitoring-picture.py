"""Scrapes the operator's /metrics into JSON lines, and plots them (scripts/monitoring-picture.sh).

    monitoring-picture.py scrape URL SAMPLES.jsonl    every 2 s until killed
    monitoring-picture.py plot SAMPLES.jsonl OUT.png
"""

import json
import re
import sys
import time
import urllib.request

SERIES = re.compile(r"^(boxtable_[a-z_]+)(\{[^}]*\})? (\S+)$")
LABEL = re.compile(r'(\w+)="([^"]*)"')
INTERVAL = 2.0


def scrape(url, path):
    start = time.time()
    with open(path, "a", encoding="utf-8") as out:
        while True:
            began = time.time()
            try:
                with urllib.request.urlopen(url, timeout=5) as response:
                    text = response.read().decode()
            except OSError:
                text = None
            if text is not None:
                samples = []
                for line in text.splitlines():
                    match = SERIES.match(line)
                    if match:
                        name, labels, value = match.groups()
                        samples.append([name, dict(LABEL.findall(labels or "")), float(value)])
                out.write(json.dumps({"t": began - start, "samples": samples}) + "\n")
                out.flush()
            time.sleep(max(0.0, INTERVAL - (time.time() - began)))


def load(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def total(scrape_, name, **match):
    return sum(
        v for n, labels, v in scrape_["samples"]
        if n == name and all(labels.get(k) == want for k, want in match.items())
    )


def buckets(scrape_, name):
    out = {}
    for n, labels, v in scrape_["samples"]:
        if n == name + "_bucket":
            out[float(labels["le"])] = v
    return out


def quantile(q, deltas):
    """histogram_quantile over cumulative bucket counts {le: count}, as Prometheus computes it."""
    les = sorted(deltas)
    if not les or deltas[les[-1]] <= 0:
        return None
    rank = q * deltas[les[-1]]
    lower_le, lower_count = 0.0, 0.0
    for le in les:
        count = deltas[le]
        if count >= rank:
            if le == float("inf"):
                return lower_le
            if count == lower_count:
                return le
            return lower_le + (le - lower_le) * (rank - lower_count) / (count - lower_count)
        lower_le, lower_count = le, count
    return None


def plot(path, png):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    scrapes = load(path)
    t = [s["t"] for s in scrapes]
    states = ["ready", "reconciling", "stalled", "suspended", "pending"]
    colours = {"ready": "#2e7d32", "reconciling": "#f9a825", "stalled": "#c62828",
               "suspended": "#6a1b9a", "pending": "#90a4ae"}
    fig, (ax1, ax2, ax3) = plt.subplots(3, 1, figsize=(10, 10), sharex=True)

    by_state = {st: [total(s, "boxtable_objects", state=st) for s in scrapes] for st in states}
    shown = [st for st in states if any(by_state[st])]
    ax1.stackplot(t, [by_state[st] for st in shown], labels=shown,
                  colors=[colours[st] for st in shown], alpha=0.85)
    waiting = [total(s, "boxtable_objects", reason="WaitingForLock") for s in scrapes]
    lock_timeout = [total(s, "boxtable_objects", state="stalled", reason="LockTimeout") for s in scrapes]
    secret = [total(s, "boxtable_objects", state="stalled", reason="SecretNotFound") for s in scrapes]
    ax1.plot(t, waiting, color="black", linestyle="--", label="of which WaitingForLock")
    ax1.plot(t, secret, color="#4e342e", linestyle=":", label="of which SecretNotFound")
    ax1.plot(t, lock_timeout, color="#880e4f", linestyle="-.", label="of which LockTimeout")
    ax1.set_ylabel("BoxTables")
    ax1.set_title("boxtable_objects by state")
    ax1.legend(loc="upper left", fontsize=8, ncol=2)

    window = 10  # scrapes: a 20 s window, as rate(...[20s]) would see it
    p50, p99, held = [], [], []
    for i, s in enumerate(scrapes):
        now = buckets(s, "boxtable_lock_wait_seconds")
        then = buckets(scrapes[max(0, i - window)], "boxtable_lock_wait_seconds")
        deltas = {le: now[le] - then.get(le, 0.0) for le in now}
        p50.append(quantile(0.5, deltas))
        p99.append(quantile(0.99, deltas))
        held.append(total(s, "boxtable_lock_held"))
    ax2.plot(t, [v if v is not None else float("nan") for v in p99], label="lock wait p99 (20 s window)", color="#c62828")
    ax2.plot(t, [v if v is not None else float("nan") for v in p50], label="lock wait p50 (20 s window)", color="#1565c0")
    ax2.set_ylabel("seconds")
    ax2.set_title("boxtable_lock_wait_seconds, and boxtable_lock_held")
    twin = ax2.twinx()
    twin.step(t, held, where="post", color="grey", alpha=0.6, label="locks held by the operator")
    twin.set_ylabel("locks held")
    lines = ax2.get_legend_handles_labels()
    more = twin.get_legend_handles_labels()
    ax2.legend(lines[0] + more[0], lines[1] + more[1], loc="upper left", fontsize=8)

    for outcome, colour in [("acquired", "#2e7d32"), ("timed_out", "#c62828")]:
        ax3.step(t, [total(s, "boxtable_lock_outcomes_total", outcome=outcome) for s in scrapes],
                 where="post", label=f"lock {outcome}", color=colour, linewidth=3, alpha=0.7)
    ax3.step(t, [total(s, "boxtable_migrations_applied_total") for s in scrapes], where="post",
             label="migration steps applied (a fresh install is one)", color="#1565c0", linestyle="--")
    ax3.step(t, [total(s, "boxtable_reconciles_total", result="retry") for s in scrapes], where="post",
             label="passes retried", color="#f9a825")
    ax3.set_ylabel("count since start")
    ax3.set_xlabel("seconds since the operator started")
    ax3.set_title("boxtable_lock_outcomes_total, boxtable_migrations_applied_total, boxtable_reconciles_total{result=\"retry\"}")
    ax3.title.set_fontsize(9)
    ax3.legend(loc="upper left", fontsize=8)
    fig.suptitle("boxtable-operator under a small scripted load (scripts/monitoring-picture.sh)")
    fig.tight_layout()
    fig.savefig(png, dpi=90)


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "scrape":
        scrape(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 4 and sys.argv[1] == "plot":
        plot(sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)
