# Sourced by bin/lab and bin/test: create .venv/ at the repo root when missing and install the
# package with its lab and test extras. Re-installs only when pyproject.toml changed (a stamp file
# holds its hash), so the second call starts in a second.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$repo/.venv"

find_python() {
    local candidate
    for candidate in "${WORKBENCH_PYTHON:-}" python3.11 python3.12 python3.10 python3; do
        [ -n "$candidate" ] || continue
        command -v "$candidate" >/dev/null 2>&1 || continue
        if "$candidate" -c 'import sys; sys.exit(not ((3, 10) <= sys.version_info[:2] <= (3, 12)))' 2>/dev/null; then
            echo "$candidate"; return 0
        fi
    done
    echo "workbench needs Python 3.10, 3.11 or 3.12 on PATH (or WORKBENCH_PYTHON=/path/to/python)." >&2
    return 1
}

if [ ! -x "$venv/bin/python" ]; then
    python="$(find_python)"
    echo "Creating $venv with $("$python" --version 2>&1)"
    "$python" -m venv "$venv"
fi

stamp="$venv/.workbench-installed"
want="$(cat "$repo/pyproject.toml" | sha256sum | cut -d' ' -f1)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    echo "Installing workbench and its dependencies into .venv (about a minute)"
    "$venv/bin/python" -m pip install --quiet --upgrade pip
    # torch first and pinned: on a CPU machine 2.13.0 must not be replaced by a CUDA build.
    # A GPU machine: set PIP_EXTRA_INDEX_URL to PyTorch's CUDA index first (see README).
    "$venv/bin/python" -m pip install --quiet "torch==2.13.0"
    "$venv/bin/python" -m pip install --quiet -e "$repo[lab,test]"
    echo "$want" > "$stamp"
fi
export PATH="$venv/bin:$PATH"
# Idle OpenMP threads must sleep, not spin: they would steal the cores that env workers need
# (measured on 2 cores: +20-28% end to end; with ACTIVE a sampler collapsed to a few dozen steps/s).
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}"
cd "$repo"
