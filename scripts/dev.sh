#!/usr/bin/env bash
# One entry point for a fresh machine (only Python 3.11 and Java 17 needed):
#   bash scripts/dev.sh demo   set up .venv, build the quickstart notebook's handler, serve it, predict, stop
#   bash scripts/dev.sh test   set up .venv (+ Chromium for the browser test), ruff (lint + format check), every test tier
#   bash scripts/dev.sh bench  set up .venv and run the benchmarks (pass --quick for the short run)
# Re-running is fast: the venv is reinstalled only when pyproject.toml changes.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
VENV=$ROOT/.venv
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3

setup_venv() {
    local stamp=$VENV/.msnb-installed want
    want=$(cat pyproject.toml | sha256sum | cut -c1-16)
    if [[ -f $stamp && $(cat "$stamp") == "$want" ]]; then return; fi
    echo "== setting up $VENV"
    [[ -x $VENV/bin/python ]] || "$PY" -m venv "$VENV"
    # torch is pinned to 2.13.0 (CPU wheel); nothing here may pull an unpinned torch.
    "$VENV/bin/python" -m pip install -q --upgrade pip
    "$VENV/bin/python" -m pip install -q -e ".[test]"
    echo "$want" > "$stamp"
}

check_java() {
    if ! command -v java >/dev/null; then
        echo "error: Java not found. TorchServe needs Java 11+ (17 recommended)." >&2
        echo "Hint: apt-get install -y openjdk-17-jre-headless  (or conda install -c conda-forge openjdk=17)" >&2
        exit 1
    fi
}

setup_browser() {
    # The widget's browser test drives Debian's Chromium through Playwright (never `playwright install`).
    if [[ -x /usr/bin/chromium ]]; then return; fi
    echo "== installing Chromium (apt)"
    local sudo=""
    [[ $(id -u) == 0 ]] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends chromium >/dev/null
}

cmd=${1:-}
shift || true
case "$cmd" in
    demo)
        check_java; setup_venv
        exec "$VENV/bin/python" -m msnb.demo "${@:-notebooks/quickstart.ipynb}" ;;
    test)
        check_java; setup_venv; setup_browser
        # Lint and format are part of the tests: CI fails on either.
        "$VENV/bin/ruff" check msnb tests bench templates
        "$VENV/bin/ruff" format --check msnb tests bench templates
        # Jupyter and TorchServe write to $HOME and $TMPDIR: keep them in a scratch dir of this run.
        scratch=$(mktemp -d "${TMPDIR:-/tmp}/msnb-test.XXXXXX")
        mkdir -p "$scratch/home" "$scratch/tmp" artifacts
        rc=0
        HOME=$scratch/home TMPDIR=$scratch/tmp MSNB_ARTIFACTS=$ROOT/artifacts \
            "$VENV/bin/python" -m pytest -n 2 --dist loadgroup -p no:cacheprovider "$@" || rc=$?
        rm -rf "$scratch"
        exit $rc ;;
    bench)
        check_java; setup_venv
        exec "$VENV/bin/python" -m bench "$@" ;;
    *)
        echo "usage: bash scripts/dev.sh demo|test|bench [args]" >&2
        exit 2 ;;
esac
