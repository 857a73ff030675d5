"""Start-up of the isolde command line.

    .venv/bin/python benchmarks/startup.py [--runs 5] [--cold-runs 1]

Measures, in a pseudo-terminal (pexpect), exactly what a user sees:
  * bare python:   `python -c pass` (the floor on this machine, for context)
  * import:        `import isolde` + the REPL modules in a fresh interpreter (no pyspark)
  * first prompt:  `python -m isolde` spawned -> "isolde> " on the screen (target < 0.5 s)
  * CPU to prompt: user+sys CPU seconds of that process until the prompt is drawn (load-independent)
  * first result:  spawned -> `SELECT 1;` typed at the first prompt -> its result on the
                   screen, on a cold JVM (Spark starts in the background meanwhile)
  * -e result:     `isolde -e "SELECT 1"` wall time (cold JVM, no terminal)
Prints a table and one JSON line (for scripts). Each cold run starts a JVM (~4-15 s).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PY = sys.executable


def _env(home: str) -> dict:
    env = dict(os.environ)
    env.update(XDG_CONFIG_HOME=os.path.join(home, "config"), XDG_DATA_HOME=os.path.join(home, "data"),
               TERM="xterm-256color", PROMPT_TOOLKIT_NO_CPR="1")
    return env


def bare_python(env: dict) -> float:
    began = time.perf_counter()
    subprocess.run([PY, "-c", "pass"], env=env, check=True)
    return time.perf_counter() - began


def import_time(env: dict) -> float:
    code = ("import time; t = time.perf_counter(); import isolde, isolde.repl.cli, isolde.repl.app, "
            "isolde.repl.runner; import sys; assert 'pyspark' not in sys.modules, 'pyspark imported at start-up'; "
            "print(time.perf_counter() - t)")
    out = subprocess.run([PY, "-c", code], capture_output=True, text=True, env=env, check=True)
    return float(out.stdout.strip())


CPU_PROBE = """
import os, resource, sys
from isolde.repl import runner

def probe(self):  # called right after the first prompt is drawn (Spark would start here)
    u = resource.getrusage(resource.RUSAGE_SELF)
    sys.stderr.write("CPU-TO-PROMPT %.4f\\n" % (u.ru_utime + u.ru_stime))
    sys.stderr.flush()
    os._exit(0)

runner.SessionHolder.start_background = probe
sys.argv = ["isolde", "--warehouse", sys.argv[1]]
from isolde.repl.cli import main
main()
"""


def cpu_to_prompt(env: dict, warehouse: str) -> float:
    """CPU seconds (user + sys, interpreter start included) until the first prompt is drawn:
    a figure that does not depend on how busy the machine is."""
    import pexpect

    child = pexpect.spawn(PY, ["-c", CPU_PROBE, warehouse], env=env, encoding="utf-8", timeout=60)
    try:
        child.expect(r"CPU-TO-PROMPT ([0-9.]+)")
        return float(child.match.group(1))
    finally:
        child.close(force=True)


def first_prompt(env: dict, warehouse: str) -> float:
    import pexpect

    began = time.perf_counter()
    child = pexpect.spawn(PY, ["-m", "isolde", "--warehouse", warehouse], env=env, encoding="utf-8", timeout=60)
    try:
        child.expect_exact("isolde> ")
        return time.perf_counter() - began
    finally:
        child.close(force=True)


def first_result(env: dict, warehouse: str) -> tuple[float, float]:
    """(prompt seconds, result seconds) from spawn, typing SELECT 1 at the first prompt."""
    import pexpect

    began = time.perf_counter()
    child = pexpect.spawn(PY, ["-m", "isolde", "--warehouse", warehouse], env=env, encoding="utf-8", timeout=300)
    try:
        child.expect_exact("isolde> ")
        prompt = time.perf_counter() - began
        child.send("SELECT 1;\r")
        child.expect_exact("(1 row)")
        return prompt, time.perf_counter() - began
    finally:
        child.close(force=True)


def e_result(env: dict, warehouse: str) -> float:
    began = time.perf_counter()
    subprocess.run([PY, "-m", "isolde", "--warehouse", warehouse, "-e", "SELECT 1"], env=env, check=True,
                   capture_output=True, stdin=subprocess.DEVNULL, timeout=300)
    return time.perf_counter() - began


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5, help="runs of the import / first-prompt measurements")
    ap.add_argument("--cold-runs", type=int, default=1, help="runs that start a JVM (first result, -e); 0 skips them")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="isolde-startup-") as home:
        env = _env(home)
        wh = os.path.join(home, "wh")
        bare = [bare_python(env) for _ in range(args.runs)]
        imports = [import_time(env) for _ in range(args.runs)]
        prompts = [first_prompt(env, wh) for _ in range(args.runs)]
        cpus = [cpu_to_prompt(env, wh) for _ in range(args.runs)]
        results = [first_result(env, wh) for _ in range(args.cold_runs)]
        e_runs = [e_result(env, wh) for _ in range(args.cold_runs)]
    report = {
        "bare_python_s": round(statistics.median(bare), 3),
        "import_s": round(statistics.median(imports), 3),
        "first_prompt_s": round(statistics.median(prompts), 3),
        "first_prompt_max_s": round(max(prompts), 3),
        "cpu_to_prompt_s": round(statistics.median(cpus), 3),
        "first_result_cold_s": round(statistics.median(r[1] for r in results), 2) if results else None,
        "e_select1_cold_s": round(statistics.median(e_runs), 2) if e_runs else None,
        "runs": args.runs,
        "cold_runs": args.cold_runs,
    }
    print(f"bare `python -c pass`         {report['bare_python_s']:.3f} s (median; the machine's floor)")
    print(f"import isolde + REPL modules  {report['import_s']:.3f} s (median of {args.runs})")
    print(f"spawn -> first prompt         {report['first_prompt_s']:.3f} s (median; max {report['first_prompt_max_s']:.3f};"
          f" target < 0.5 s)")
    print(f"CPU time to the first prompt  {report['cpu_to_prompt_s']:.3f} s (user+sys incl. the interpreter;"
          " independent of machine load)")
    if results:
        print(f"spawn -> first SELECT result  {report['first_result_cold_s']:.2f} s (cold JVM)")
        print(f"isolde -e 'SELECT 1'          {report['e_select1_cold_s']:.2f} s (cold JVM)")
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
