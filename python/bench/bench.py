"""Calls per second of stackflow from Python against the command line in a loop, and a
1,000-point sweep from Python against `stackflow sweep`. Measured and printed, never asserted.

    python python/bench/bench.py [--binary target/release/stackflow]

Run from the repository root with the package installed (README: `pip install ./python`).
Each command-line call is a process start, the model, and `json.loads` of what it printed,
as a script driving the command line pays; each Python call is the model and the answer
handed over as Python objects. Timings are the median of several repeats.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from typing import Callable, List

import stackflow


def per_call(f: Callable[[], object], calls: int, repeats: int = 5) -> float:
    """Median seconds per call of `f` over `repeats` runs of `calls` calls."""
    f()  # warm: files read, parsed and kept
    times: List[float] = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            f()
        times.append((time.perf_counter() - start) / calls)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--binary", default="target/release/stackflow")
    args = parser.parse_args()
    binary = args.binary

    def cli(*argv: str) -> object:
        out = subprocess.run([binary, *argv, "--json"], capture_output=True, check=True)
        return json.loads(out.stdout)

    print(f"stackflow {stackflow.__version__}, {os.cpu_count()} cores")
    cases = [
        ("predict GEMM 8192^3 on H100 (2.6 kB answer)",
         lambda: stackflow.predict("workloads/gemm-8192.yaml"),
         lambda: cli("predict", "--workload", "workloads/gemm-8192.yaml")),
        ("predict GPT 1.7B on H100 (61 kB answer: every kernel)",
         lambda: stackflow.predict(),
         lambda: cli("predict")),
        ("predict GPT-3 175B on 1024 A100s, t8-p16-d8",
         lambda: stackflow.predict("workloads/gpt3-175b.yaml", system="templates/dgx-a100.yaml",
                                   devices=1024, strategy="t8-p16-d8-mb1"),
         lambda: cli("predict", "--workload", "workloads/gpt3-175b.yaml", "--system",
                     "templates/dgx-a100.yaml", "--devices", "1024", "--strategy", "t8-p16-d8-mb1")),
    ]
    print(f"{'call':58} {'Python':>12} {'CLI loop':>12} {'ratio':>7}")
    for name, py, command in cases:
        t_py = per_call(py, 200)
        t_cli = per_call(command, 20)
        print(f"{name:58} {1 / t_py:9.0f}/s {1 / t_cli:9.0f}/s {t_cli / t_py:6.1f}x"
              f"   ({t_py * 1e6:.0f} us vs {t_cli * 1e3:.2f} ms)")

    study = "python/bench/sweep-1000.yaml"
    folder = tempfile.mkdtemp(prefix="stackflow-bench-")
    runs = {"Python": [], "CLI": []}
    for i in range(5):
        out_py, out_cli = os.path.join(folder, f"py{i}"), os.path.join(folder, f"cli{i}")
        start = time.perf_counter()
        r = stackflow.sweep(study, out=out_py)
        runs["Python"].append(time.perf_counter() - start)
        start = time.perf_counter()
        c = cli("sweep", study, "--out", out_cli)
        runs["CLI"].append(time.perf_counter() - start)
        assert isinstance(c, dict) and r["counts"] == c["counts"]
    shutil.rmtree(folder)
    points = r["counts"]["evaluated"]
    t_py, t_cli = statistics.median(runs["Python"]), statistics.median(runs["CLI"])
    print(f"sweep of {points} points (predict, all cores): Python {t_py:.3f} s, "
          f"stackflow sweep {t_cli:.3f} s ({points / t_py:.0f} vs {points / t_cli:.0f} points/s)")
    start = time.perf_counter()
    rows = stackflow.sweep_rows(r)
    print(f"sweep_rows: {len(rows)} rows in {(time.perf_counter() - start) * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
