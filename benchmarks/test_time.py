"""Where the README's test command spends this machine's time, from one run of it.

The command runs as the README gives it (`python -m pytest`, every test and notebook), with
`--durations=0` added so that pytest reports each test's time; arguments after the script's
name go to pytest as well. Every half second meanwhile, psutil reads the machine's CPU times
and the CPU time of every process started since the run began. Then it prints:

- the wall time, and the share of the cores' time that was busy. Near 100%, the command can
  only finish sooner by doing less work or cheaper work, not by running more of it at once;
- CPU seconds by kind of process: notebook kernels, Chromium, the pytest workers, the training
  commands the tests start, and so on. A process's last half second, and processes shorter
  than that, go uncounted; the line "not attributed" holds them and the system's own work;
- each file's test time, summed over its tests from pytest's report.

    python benchmarks/test_time.py                        # the whole command: 6 to 12 minutes
    python benchmarks/test_time.py tests/test_model.py    # one file

Nothing here is a target: it says where the time goes, on the CPU named in its first line.
"""

import argparse
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import psutil
from browser_translate import cpu_model  # the sibling benchmark's reading of /proc/cpuinfo

ROOT = Path(__file__).resolve().parents[1]
SAMPLE_SECONDS = 0.5
# (kind, a test of a process's command line): the first that matches names its kind
KINDS = [
    ("notebook kernels (nbval, JupyterLab)", lambda c: "ipykernel_launcher" in c),
    ("Chromium (every page the tests open)", lambda c: "chrom" in c),
    ("Playwright's driver", lambda c: "playwright" in c),
    ("torchrun launchers", lambda c: "torch.distributed.run" in c),
    ("package commands the tests start (train, ...)", lambda c: "-m transformer" in c),
    ("the strict book build", lambda c: "jupyter-book" in c or "sphinx" in c),
    ("JupyterLab's server", lambda c: "jupyter lab" in c or "jupyter-lab" in c),
    # last: the commands above name pytest's temporary folders. pytest-xdist's workers start
    # with execnet's bootstrap line, which names neither pytest nor execnet
    ("pytest and its workers (in-process tests)", lambda c: "pytest" in c or "sys.stdin" in c),
]
DURATION = re.compile(r"^([\d.]+)s (?:setup|call|teardown)\s+([^:\s]+)::", re.MULTILINE)


def kind_of(command: str) -> str:
    return next((kind for kind, matches in KINDS if matches(command)), "other processes")


def busy_seconds() -> float:
    """CPU seconds of all cores spent running something, since boot (Linux's fields)."""
    times = psutil.cpu_times()
    return times.user + times.nice + times.system + times.irq + times.softirq


class Sampler(threading.Thread):
    """Keeps the latest CPU time of every process started after `since`."""

    def __init__(self, since: float):
        super().__init__(daemon=True)
        self.since, self.stopped = since, threading.Event()
        self.cpu: dict[tuple[int, float], tuple[str, float]] = {}  # (pid, start): (kind, s)

    def run(self) -> None:
        while not self.stopped.wait(SAMPLE_SECONDS):
            for process in psutil.process_iter(["create_time", "cmdline", "cpu_times"]):
                info = process.info
                if info["cpu_times"] is None or info["create_time"] < self.since:
                    continue  # gone, not ours to read, or older than the run
                key = (process.pid, info["create_time"])
                kind = (
                    self.cpu[key][0]
                    if key in self.cpu
                    else kind_of(" ".join(info["cmdline"] or []))
                )
                self.cpu[key] = (kind, info["cpu_times"].user + info["cpu_times"].system)

    def by_kind(self) -> Counter:
        totals = Counter()
        for kind, seconds in self.cpu.values():
            totals[kind] += seconds
        return totals


def main(pytest_args: list[str]) -> int:
    command = [sys.executable, "-m", "pytest", "--durations=0", *pytest_args]
    print(f"{cpu_model()}, {psutil.cpu_count()} cores: {' '.join(command[1:])}", flush=True)
    start, busy_before = time.time(), busy_seconds()
    sampler = Sampler(since=start - 1)
    sampler.start()
    with tempfile.TemporaryFile("w+") as log:
        status = subprocess.run(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        wall, busy = time.time() - start, busy_seconds() - busy_before
        sampler.stopped.set()
        sampler.join()
        log.seek(0)
        report = log.read()
    if status.returncode != 0:
        print(report[-6000:])
        return status.returncode

    cores = psutil.cpu_count()
    print(report.rstrip().splitlines()[-1].strip("= "))
    print(
        f"wall {wall:.0f} s; the cores busy {busy:,.0f} of {wall * cores:,.0f} core-seconds "
        f"({busy / (wall * cores):.0%})"
    )
    print("\nCPU seconds by kind of process")
    totals = sampler.by_kind()
    for kind, seconds in totals.most_common():
        print(f"{seconds:9,.0f}  {kind}")
    print(f"{busy - sum(totals.values()):9,.0f}  not attributed (see the docstring)")

    per_file = Counter()
    for seconds, path in DURATION.findall(report):
        per_file[path] += float(seconds)
    print("\nTest time by file (seconds, summed over its tests; the workers run side by side)")
    for path, seconds in per_file.most_common():
        print(f"{seconds:9,.1f}  {path}")
    return 0


def parse_args(argv: list[str]) -> list[str]:
    """The arguments for pytest; --help describes the script."""
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n")[0],
        epilog="Every other argument goes to pytest (e.g. a test file).",
    )
    return parser.parse_known_args(argv)[1]


if __name__ == "__main__":
    sys.exit(main(parse_args(sys.argv[1:])))
