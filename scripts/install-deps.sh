#!/usr/bin/env bash
# install-deps.sh — installs the Debian packages megafold's build and tests need, when
# they are missing. Idempotent and quiet when everything is present. Uses sudo when not
# root. CUDA is not installed here: with nvcc on PATH the CUDA code is built too.
set -euo pipefail
pkgs=(
  build-essential pkg-config      # compiler, make
  libopenblas-dev                 # CPU GEMM
  zlib1g-dev                      # gzip'd mmCIF / a3m
  libzstd-dev liblmdb-dev         # feature cache
  libjansson-dev                  # JSON inputs and configs
  libopenmpi-dev openmpi-bin      # multi-rank launch and CPU tests
  python3 python3-gemmi python3-numpy  # independent reference readers used by tests
)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0
sudo=""
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "install-deps: missing ${missing[*]}; run as root or install sudo" >&2; exit 1; }
  sudo="sudo"
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install-deps: done"
