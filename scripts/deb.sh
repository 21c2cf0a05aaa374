#!/usr/bin/env bash
# Builds the Debian package, target/debian/gputop_<version>-1_<arch>.deb, with cargo-deb:
# the binary, the man page and the bash, zsh and fish completions it generates, the
# exporter's systemd unit (installed, not enabled) and the commented default configuration
# as documentation. Installs cargo-deb into target/tools when it is not on the PATH.
#   bash scripts/deb.sh && sudo dpkg -i target/debian/gputop_*.deb
set -euo pipefail
cd "$(dirname "$0")/.."

cargo build --release --locked
bin=target/release/gputop
assets=target/deb-assets
rm -rf "$assets" target/debian
mkdir -p "$assets"
"$bin" man | gzip -9n > "$assets/gputop.1.gz"
"$bin" completions bash > "$assets/gputop.bash"
"$bin" completions zsh > "$assets/_gputop"
"$bin" completions fish > "$assets/gputop.fish"
# The package puts the binary in /usr/bin, not /usr/local/bin.
sed 's|/usr/local/bin/gputop|/usr/bin/gputop|' config/systemd/gputop-exporter.service \
  > "$assets/gputop-exporter.service"

deb=$(command -v cargo-deb || true)
if [ -z "$deb" ]; then
  deb=target/tools/bin/cargo-deb
  [ -x "$deb" ] || cargo install --quiet --locked cargo-deb --version 3.8.0 --root target/tools
fi
"$deb" --no-build --locked -p gputop
ls target/debian/gputop_*.deb
