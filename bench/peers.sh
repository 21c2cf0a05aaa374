#!/usr/bin/env bash
# gputop beside nvitop, nvtop and gpustat on the same simulated machine (bench/peers.py says
# what is measured). Installs what it needs on a fresh machine: nvitop and gpustat from PyPI
# in .venv-bench, nvtop from Debian's contrib component (adding a sources entry for it).
#   bash bench/peers.sh                 # about 15 minutes; prints a markdown table
#   bash bench/peers.sh --smoke         # tiny scenario, seconds (CI)
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --locked --quiet -p gputop -p nvml-sim
if [ ! -x /usr/bin/time ] && [ "$(id -u)" = 0 ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq time
fi
[ -f target/release/libnvml_sim.so ] || cp target/release/deps/libnvml_sim.so target/release/
if [ ! -x .venv-bench/bin/nvitop ] || [ ! -x .venv-bench/bin/gpustat ]; then
  python3 -m venv .venv-bench
  .venv-bench/bin/pip install --quiet nvitop gpustat
fi
if ! command -v nvtop >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    codename=$(. /etc/os-release && echo "$VERSION_CODENAME")
    if ! grep -rqs "contrib" /etc/apt/sources.list /etc/apt/sources.list.d/; then
      printf 'Types: deb\nURIs: http://deb.debian.org/debian\nSuites: %s\nComponents: contrib\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
        "$codename" > /etc/apt/sources.list.d/gputop-bench-contrib.sources
    fi
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nvtop
  else
    echo "nvtop is missing and cannot be installed here (needs root and apt): measured without it" >&2
  fi
fi
exec python3 bench/peers.py "$@"
