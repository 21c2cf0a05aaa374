#!/usr/bin/env python3
"""The functions gputop runs, for build.rs to have the linker place first.

    python3 bench/symbol-order.py           # build, trace, write bench/symbol-order.txt, relink
    python3 bench/symbol-order.py --check   # the release binary is laid out by the list

Writing traces target/release/gputop under valgrind's callgrind, which names every function
that ran: one-shot reports with 64 and 512 processes, then interactive 200x50 runs with 64
and 512 processes in which keys sort, move, open the process screen and quit. The list holds
the one-shots' functions first, then those only the interactive runs added, each run's by
name. It names symbols as the linker sees them, so a new compiler or new
dependency versions leave it stale; `--check` (CI runs it) says so, and writing it again is
this script's first command. It needs valgrind, and installs Debian's when run as root.

`--check` fails when fewer than three quarters of the listed functions are in the binary,
or when the binary's code does not start with them (the link did not take the list: see
build.rs for when it is passed).
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import peers  # noqa: E402  (the simulated machine: scenarios, environment, pseudo-terminal)

ROOT = peers.ROOT
ORDER = ROOT / "bench/symbol-order.txt"
HEADER = "# Written by bench/symbol-order.py: the functions gputop runs, in link order.\n"
# Keys sent to the interactive runs, each after a pause: sort twice, move down, open the
# selected process's screen, leave it, quit.
KEYS = [b".", b".", b"j", b"j", b"\r", b"\x1b", b"q"]


def text_symbols(binary):
    """Address and name of each function in `binary`'s symbol table."""
    out = subprocess.run(["nm", "--defined-only", str(binary)], capture_output=True, text=True, check=True)
    symbols = []
    for line in out.stdout.splitlines():
        fields = line.split()
        if len(fields) == 3 and fields[1] in "tTwW":
            symbols.append((int(fields[0], 16), fields[2]))
    return symbols


def executed(callgrind_out, binary):
    """Functions of `binary` that ran."""
    names, objects, found = {}, {}, set()
    current_object = None
    pattern = re.compile(r"^(fn|cfn|ob|cob)=\((\d+)\)(?: (.*))?$")
    for line in callgrind_out.read_text(errors="replace").splitlines():
        match = pattern.match(line)
        if not match:
            continue
        kind, ident, name = match.groups()
        table = objects if kind.endswith("ob") else names
        if name is not None:
            table[ident] = name
        if kind == "ob":
            current_object = objects.get(ident)
        elif kind == "fn" and current_object == str(binary):
            # A recursive call's deeper levels are named `NAME'2` and so on.
            found.add(re.sub(r"'\d+$", "", names[ident]))
    return found


def callgrind(command, out):
    return ["valgrind", "--tool=callgrind", "--demangle=no", "--compress-strings=yes",
            f"--callgrind-out-file={out}", *command]


def trace_once(binary, simdir, env, out):
    lib = str(simdir / "libnvidia-ml.so.1")
    subprocess.run(callgrind([str(binary), "--once", "--nvml-lib", lib], out),
                   env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)


def trace_interactive(binary, simdir, env, out, settle):
    lib = str(simdir / "libnvidia-ml.so.1")
    command = callgrind([str(binary), "--nvml-lib", lib, "--interval", "1"], out)
    terminal = peers.Terminal(command, env)
    try:
        time.sleep(settle)
        for key in KEYS:
            os.write(terminal.master, key)
            time.sleep(settle / 3)
        terminal.process.wait(timeout=120)
    finally:
        terminal.close()
    if terminal.process.returncode != 0:
        raise RuntimeError(f"the traced interactive run exited with {terminal.process.returncode}")


def build():
    """The release binary and the simulator, as the benchmarks build them."""
    subprocess.run(["bash", str(ROOT / "bench/build.sh")], check=True)


def write(binary):
    if not shutil.which("valgrind"):
        if os.geteuid() != 0 or not shutil.which("apt-get"):
            sys.exit("symbol-order: valgrind is missing (Debian package valgrind)")
        subprocess.run(["apt-get", "update", "-qq"], check=True)
        subprocess.run(["apt-get", "install", "-y", "-qq", "valgrind"], check=True,
                       env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
    work = Path(tempfile.mkdtemp(prefix="gputop-order-"))
    simdir = work / "sim"
    simdir.mkdir()
    shutil.copy(peers.SIM, simdir / "libnvidia-ml.so.1")
    sleepers = [subprocess.Popen(["sleep", "100000"]) for _ in range(512)]
    pids = [s.pid for s in sleepers]
    order = {}
    try:
        runs = [("once", 8, 8), ("once", 8, 64), ("interactive", 8, 8), ("interactive", 8, 64)]
        for kind, gpus, per_gpu in runs:
            path = work / f"{gpus}x{gpus * per_gpu}.toml"
            path.write_text(peers.scenario(gpus, per_gpu))
            env = peers.env_for(simdir, path, pids[: gpus * per_gpu])
            out = work / f"{kind}-{gpus * per_gpu}.callgrind"
            if kind == "once":
                trace_once(binary, simdir, env, out)
            else:
                trace_interactive(binary, simdir, env, out, settle=15)
            # Sorted by name within a run: callgrind's own order varies from run to run.
            added = sorted(executed(out, binary) - order.keys())
            order.update(dict.fromkeys(added))
            print(f"{kind}, {gpus * per_gpu} processes: {len(added)} more functions", file=sys.stderr)
    finally:
        for sleeper in sleepers:
            sleeper.kill()
        shutil.rmtree(work, ignore_errors=True)
    present = {name for _, name in text_symbols(binary)}
    names = [name for name in order if name in present]
    ORDER.write_text(HEADER + "".join(f"{name}\n" for name in names))
    print(f"wrote {ORDER.relative_to(ROOT)}: {len(names)} functions", file=sys.stderr)


def listed():
    return [line for line in ORDER.read_text().splitlines() if line and not line.startswith("#")]


def check(binary):
    names = listed()
    symbols = text_symbols(binary)
    address = {name: at for at, name in symbols}
    found = [name for name in names if name in address]
    print(f"symbol order: {len(found)} of the {len(names)} functions listed are in {binary.name}")
    if not found or len(found) * 4 < len(names) * 3:
        sys.exit(f"bench/symbol-order.txt is stale ({len(found)} of {len(names)} functions found): "
                 "write it again with `python3 bench/symbol-order.py`")
    wanted = set(found)
    end_of_listed = max(address[name] for name in found)
    interlopers = [name for at, name in symbols if at < end_of_listed and name not in wanted]
    if interlopers:
        sys.exit(f"{binary} was not linked in bench/symbol-order.txt's order: {len(interlopers)} other "
                 f"functions lie among the listed ones (is the linker LLD? see build.rs)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="check the release binary against the list")
    parser.add_argument("--binary", type=Path, default=peers.GPUTOP, help="with --check: the binary to check")
    args = parser.parse_args()
    binary = args.binary.resolve()
    if args.check:
        if not binary.exists():
            sys.exit(f"{binary} is missing: build it with `cargo build --release`")
        check(binary)
        return
    build()
    write(peers.GPUTOP)
    # Linked again, in the new order (build.rs passes the list to the linker).
    build()
    check(peers.GPUTOP)


if __name__ == "__main__":
    main()
