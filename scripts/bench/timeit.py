#!/usr/bin/env python3
"""Times whole commands (process start to exit), interleaved, with an untimed prepare step.

    timeit.py --runs 15 --json out.json --prepare 'CMD' \
        --variant ours='CMD' --variant sqlx='CMD' --variant psql='CMD'

Every round runs each variant once, in a rotated order (round r starts with variant r mod k), so
slow drift on a shared machine (other builds, thermal, page cache) hits every variant alike. Before
each timed command the prepare command runs untimed (for example: drop and recreate the database).
`--prepare-for NAME='CMD'` overrides it for one variant. A variant that exits non-zero aborts the
run with its output. Commands run with `bash -c`; stdout goes to /dev/null.

Writes {name: {"median": s, "min": s, "max": s, "runs": [s, ...]}} and prints a one-line summary
per variant to stderr. `--check NAME='CMD'` runs CMD after each timed run of NAME (untimed); a
non-zero exit aborts (used to verify that the work was really done).
"""
import argparse
import json
import statistics
import subprocess
import sys
import time


def run(cmd, what):
    result = subprocess.run(
        ["bash", "-c", cmd], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False
    )
    if result.returncode != 0:
        sys.stderr.write(f"timeit: {what} failed ({result.returncode}): {cmd}\n")
        sys.stderr.write(result.stderr.decode("utf-8", "replace")[-4000:])
        sys.exit(1)


def pairs(items):
    out = {}
    for item in items or []:
        name, _, cmd = item.partition("=")
        out[name] = cmd
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--json", required=True)
    ap.add_argument("--prepare", default="")
    ap.add_argument("--prepare-for", action="append")
    ap.add_argument("--check", action="append")
    ap.add_argument("--variant", action="append", required=True)
    args = ap.parse_args()
    variants = list(pairs(args.variant).items())
    prepare_for = pairs(args.prepare_for)
    checks = pairs(args.check)
    times = {name: [] for name, _ in variants}
    for r in range(args.runs):
        k = r % len(variants)
        for name, cmd in variants[k:] + variants[:k]:
            prepare = prepare_for.get(name, args.prepare)
            if prepare:
                run(prepare, f"prepare for {name}")
            start = time.perf_counter()
            run(cmd, name)
            times[name].append(time.perf_counter() - start)
            if name in checks:
                run(checks[name], f"check for {name}")
    out = {}
    for name, runs in times.items():
        out[name] = {
            "median": statistics.median(runs),
            "min": min(runs),
            "max": max(runs),
            "runs": runs,
        }
        sys.stderr.write(
            f"  {name:<24} median {out[name]['median']*1000:9.1f} ms"
            f"  min {out[name]['min']*1000:9.1f}  max {out[name]['max']*1000:9.1f}  (n={len(runs)})\n"
        )
    with open(args.json, "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
