#!/usr/bin/env bash
# `make install-public-index`: `make venv` in a fresh clone of this repository's HEAD, with pip
# seeing only the public package index, as on a machine nobody set pip up on: no pip configuration
# files, no PIP_* settings of this shell (local wheel folders, extra indexes, constraints), an
# empty pip cache. Then torch and the project's packages imported in the new venv. Prints what it
# installed, how long `make venv` took and its exit status; removes the folder whatever happens.
#   bash requirements/install_public_index.sh [PYTHON]
set -uo pipefail
python=${1:-python3}
repo=$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
git clone -q "$repo" "$tmp/clone" || exit 1
cd "$tmp/clone" || exit 1

# every PIP_* variable of this shell goes, and pip reads no configuration file
unset $(env | sed -n 's/^\(PIP_[A-Z_]*\)=.*/\1/p')
export PIP_CONFIG_FILE=/dev/null PIP_CACHE_DIR="$tmp/pip-cache"

start=$(date +%s)
make venv PYTHON="$python"
status=$?
seconds=$(($(date +%s) - start))
if [ "$status" -eq 0 ]; then
    .venv/bin/python -c '
import torch, lightning_modules, datamodules, sweeps
print(f"imports: torch {torch.__version__} (CUDA {torch.version.cuda}), lightning_modules, datamodules, sweeps")
' || status=$?
    runtime=$(.venv/bin/python -m pip list --format=freeze 2>/dev/null | grep -cE '^(nvidia-|cuda-|triton=)')
    echo "packages: $(.venv/bin/python -m pip list --format=freeze 2>/dev/null | wc -l) installed, $runtime of them CUDA runtime (nvidia-*, cuda-*, triton); venv $(du -sh .venv | cut -f1)"
fi
echo "make venv from the public index: exit status $status after $((seconds / 60)) min $((seconds % 60)) s (HEAD $(git rev-parse --short HEAD), $(date -u +%Y-%m-%d), $(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2 | sed 's/^ //'))"
exit "$status"
