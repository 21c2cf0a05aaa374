#!/usr/bin/env bash
# gputop beside nvitop, nvtop and gpustat on the same simulated machine (bench/peers.py says
# what is measured). Installs what it needs on a fresh machine: nvitop and gpustat from PyPI
# in .venv-bench, nvtop from Debian's contrib component (adding a sources entry for it), and
# nvtop 3.2 built from Debian 13's source tarball into target/bench-nvtop: Debian 12's 3.0.1
# has no one-shot mode (-s); 3.2's binary package needs a newer glibc than Debian 12's.
#   bash bench/peers.sh                 # about 15 minutes; prints a markdown table
#   bash bench/peers.sh --smoke         # tiny scenario, seconds (CI)
set -euo pipefail
cd "$(dirname "$0")/.."
bash bench/build.sh
if [ ! -x /usr/bin/time ] && [ "$(id -u)" = 0 ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq time
fi
if [ ! -x .venv-bench/bin/nvitop ] || [ ! -x .venv-bench/bin/gpustat ]; then
  python3 -m venv .venv-bench
  .venv-bench/bin/pip install --quiet nvitop gpustat
fi
if ! command -v nvtop >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    codename=$(. /etc/os-release && echo "$VERSION_CODENAME")
    added=
    if ! grep -rqs "contrib" /etc/apt/sources.list /etc/apt/sources.list.d/; then
      added=/etc/apt/sources.list.d/gputop-bench-contrib.sources
      # Removed on every way out, a failed install too.
      trap 'rm -f "$added"; apt-get update -qq || true' EXIT
      printf 'Types: deb\nURIs: http://deb.debian.org/debian\nSuites: %s\nComponents: contrib\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
        "$codename" > "$added"
    fi
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nvtop
    # The machine's sources stay as they were; the package stays installed.
    if [ -n "$added" ]; then
      rm -f "$added"
      apt-get update -qq || true
      trap - EXIT
    fi
  else
    echo "nvtop is missing and cannot be installed here (needs root and apt): measured without it" >&2
  fi
fi
if [ ! -x target/bench-nvtop/nvtop ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    if ! command -v cmake >/dev/null 2>&1 || ! command -v cc >/dev/null 2>&1 \
      || ! [ -e /usr/include/ncurses.h ]; then
      apt-get update -qq
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends cmake gcc libc6-dev libncurses-dev
    fi
    # Debian 13's source index in a private apt state: the machine's own sources stay as they are.
    apt_state=$(mktemp -d)
    trap 'rm -rf "$apt_state"' EXIT
    chmod 0755 "$apt_state"  # apt fetches as its own user, _apt
    mkdir -p "$apt_state/lists/partial" "$apt_state/src"
    echo "deb-src http://deb.debian.org/debian trixie main" > "$apt_state/sources.list"
    apt_private=(-o Dir::Etc::sourcelist="$apt_state/sources.list" -o Dir::Etc::sourceparts=-
      -o Dir::State::Lists="$apt_state/lists")
    apt-get "${apt_private[@]}" update -qq || true
    # Only the upstream tarball is used; the packaging files may be missing from the mirror.
    (cd "$apt_state/src" && apt-get "${apt_private[@]}" source --download-only -qq nvtop >/dev/null 2>&1) || true
    tarball=$(ls "$apt_state"/src/nvtop_*.orig.tar.* 2>/dev/null | head -1)
    if [ -n "$tarball" ]; then
      tar -xf "$tarball" -C "$apt_state/src"
      cmake -S "$apt_state"/src/nvtop-*/ -B "$apt_state/build" -DCMAKE_BUILD_TYPE=Release \
        -DNVIDIA_SUPPORT=ON -DAMDGPU_SUPPORT=OFF -DINTEL_SUPPORT=OFF -DMSM_SUPPORT=OFF \
        -DPANFROST_SUPPORT=OFF -DPANTHOR_SUPPORT=OFF -DV3D_SUPPORT=OFF -DASCEND_SUPPORT=OFF \
        -DTPU_SUPPORT=OFF >/dev/null
      cmake --build "$apt_state/build" -j "$(nproc)" >/dev/null
      mkdir -p target/bench-nvtop
      cp "$apt_state/build/src/nvtop" target/bench-nvtop/nvtop
    else
      echo "nvtop's source could not be fetched: nvtop -s is not measured" >&2
    fi
    rm -rf "$apt_state"
    trap - EXIT
  else
    echo "nvtop -s needs nvtop 3.2 built from source (root and apt): not measured" >&2
  fi
fi
exec python3 bench/peers.py "$@"
