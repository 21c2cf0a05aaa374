#!/usr/bin/env bash
# The Python module's wheel for Linux aarch64, cross-built on x86-64, then imported and run
# on the built-in demo machine by an aarch64 CPython under qemu-user. Run as root on Debian:
# it installs the cross linker and qemu-user-static (Debian's packages, which stay), adds
# Rust's aarch64 standard library when it is missing (and removes it again), and takes
# Debian's aarch64 CPython from the archive into a temporary folder, with its own apt
# state, so the machine's sources stay as they are. CI runs this.
#   bash crates/gputop-py/build-aarch64.sh     # the wheel in target/wheels-aarch64
set -euo pipefail
cd "$(dirname "$0")/../.."

if [ "$(id -u)" -ne 0 ]; then
  echo "build-aarch64: run as root: it installs Debian's cross linker and qemu-user-static" >&2
  exit 1
fi
need=()
command -v aarch64-linux-gnu-gcc >/dev/null 2>&1 || need+=(gcc-aarch64-linux-gnu libc6-dev-arm64-cross)
command -v qemu-aarch64-static >/dev/null 2>&1 || need+=(qemu-user-static)
if [ ${#need[@]} -gt 0 ]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}"
fi

work=$(mktemp -d)
added_target=
cleanup() {
  rm -rf "$work"
  if [ -n "$added_target" ]; then rustup target remove aarch64-unknown-linux-gnu >/dev/null 2>&1 || true; fi
}
trap cleanup EXIT
if ! rustup target list --installed | grep -qx aarch64-unknown-linux-gnu; then
  rustup target add aarch64-unknown-linux-gnu
  added_target=yes
fi

[ -x target/py-venv/bin/maturin ] || { python3 -m venv target/py-venv && target/py-venv/bin/pip install --quiet "maturin>=1.7,<2"; }
rm -rf target/wheels-aarch64
CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc \
  target/py-venv/bin/maturin build --quiet --release --locked --target aarch64-unknown-linux-gnu \
  -m crates/gputop-py/Cargo.toml -o target/wheels-aarch64
wheel=$(ls target/wheels-aarch64/gputop-*-cp39-abi3-manylinux_*_aarch64.whl)

# Debian's aarch64 CPython, unpacked (not installed) from the archive.
chmod 0755 "$work"  # apt fetches as its own user, _apt
mkdir -p "$work/lists/partial" "$work/cache/archives/partial" "$work/debs" "$work/root" "$work/site"
echo "deb [arch=arm64] http://deb.debian.org/debian bookworm main" > "$work/sources.list"
apt_arm64=(-o Dir::Etc::sourcelist="$work/sources.list" -o Dir::Etc::sourceparts=-
  -o Dir::State::Lists="$work/lists" -o Dir::Cache="$work/cache" -o Dir::State::status=/dev/null
  -o APT::Architecture=arm64 -o APT::Architectures::=arm64)
apt-get "${apt_arm64[@]}" update -qq
(cd "$work/debs" && apt-get "${apt_arm64[@]}" download -qq \
  python3.11-minimal libpython3.11-minimal libc6 zlib1g libexpat1 libgcc-s1 2>/dev/null)
for deb in "$work"/debs/*.deb; do dpkg-deb -x "$deb" "$work/root"; done
python3 -m zipfile -e "$wheel" "$work/site"

out=$(qemu-aarch64-static -L "$work/root" "$work/root/usr/bin/python3.11" -S -c "
import sys
sys.path.insert(0, '$work/site')
import gputop
gputop.demo()
devices = gputop.Device.all()
print(len(devices), devices[0].memory_used() > 0, len(devices[0].processes()) > 0)
")
echo "aarch64 wheel on the demo machine: $out"
[ "$out" = "4 True True" ] || { echo "build-aarch64: the aarch64 wheel read the demo machine wrong" >&2; exit 1; }
echo "$wheel"
