#!/usr/bin/env bash
# One entry point for a fresh machine (Python 3.11 and Java 17 needed; 3.13 too for its test tiers):
#   bash scripts/dev.sh demo   set up .venv, build the quickstart notebook's handler, serve it, predict, stop
#   bash scripts/dev.sh test   set up .venv (+ Chromium for the browser test), ruff (lint + format check), the
#                              docs' strict build, every test tier; beside it, the install, unit, spine and core kernel
#                              tiers on the other tested Python versions (TEST_PYTHONS). Arguments run only those tests.
#   bash scripts/dev.sh bench  set up .venv and run the benchmarks (pass --quick for the short run, --smoke for the least run)
# pyproject.toml declares ranges; constraints.txt pins this environment. A venv is reinstalled only when
# pyproject.toml, constraints.txt or TORCH_INDEX_URL change.
#   PYTHON           the interpreter of .venv (default python3.11)
#   TORCH_INDEX_URL  the index torch comes from, e.g. https://download.pytorch.org/whl/cpu for the CPU build
#                    (unset: pip's configured index; PyPI's default on Linux is the CUDA build)
#   TEST_PYTHONS     the other Python versions the full test run covers (default "3.13"; "" for none)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
VENV=$ROOT/.venv
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3
TEST_PYTHONS=${TEST_PYTHONS-3.13}

setup_venv() {  # setup_venv VENV PYTHON EXTRAS
    local venv=$1 py=$2 extras=$3 stamp=$1/.msnb-installed want
    want=$(cat pyproject.toml constraints.txt <(echo "$extras ${TORCH_INDEX_URL:-}") | sha256sum | cut -c1-16)
    if [[ -f $stamp && $(cat "$stamp") == "$want" ]]; then return; fi
    echo "== setting up $venv"
    [[ -x $venv/bin/python ]] || "$py" -m venv "$venv"
    # uv installs what pip would, from pip's own settings, in a fraction of pip's time (it unpacks wheels in parallel
    # and links them from its cache); where uv cannot run or resolve, pip does it.
    if ! uv_install "$venv" "$extras"; then
        echo "== uv did not set up $venv: pip does"
        "$venv/bin/python" -m pip install -q --upgrade pip
        if [[ -n ${TORCH_INDEX_URL:-} ]]; then
            "$venv/bin/python" -m pip install -q -c constraints.txt --index-url "$TORCH_INDEX_URL" torch
        fi
        "$venv/bin/python" -m pip install -q -c constraints.txt -e ".[$extras]"
    fi
    echo "$want" > "$stamp"
}

uv_install() {  # uv_install VENV EXTRAS: pip's install of setup_venv, done by uv (constraints.txt pins uv too)
    local venv=$1 extras=$2
    "$venv/bin/python" -m pip install -q -c constraints.txt uv || return 1
    (
        uv_settings "$venv/bin/python"
        export UV_PYTHON=$venv/bin/python UV_CONSTRAINT="$ROOT/constraints.txt${UV_CONSTRAINT:+ $UV_CONSTRAINT}"
        if [[ -n ${TORCH_INDEX_URL:-} ]]; then
            "$venv/bin/uv" pip install -q --index-url "$TORCH_INDEX_URL" torch || exit 1
        fi
        "$venv/bin/uv" pip install -q --upgrade-package pip pip -e ".[$extras]"
    )
}

uv_settings() {  # uv_settings PYTHON: export what makes uv install as pip would (pip's settings, its index strategy)
    pip_settings_for_uv "$1"
    # As pip does: the best match across every index, and byte-compiled modules (no process compiles them again).
    export UV_INDEX_STRATEGY=unsafe-best-match UV_COMPILE_BYTECODE=1
}

pip_settings_for_uv() {  # pip_settings_for_uv PYTHON: export, for uv, the indexes, links, constraints and CA pip uses
    local line key value  # `pip config list`: each file's settings, then PIP_* variables (the later wins, as in pip)
    while IFS= read -r line; do
        key=${line%%=*} value=${line#*=}
        key=${key#*.} value=${value#\'} value=${value%\'}
        case $key in
            index-url) export UV_DEFAULT_INDEX=$value ;;
            extra-index-url) export UV_EXTRA_INDEX_URL=$value ;;
            find-links) export UV_FIND_LINKS=${value// /,} ;;
            constraint) export UV_CONSTRAINT=$value ;;
            cert) export SSL_CERT_FILE=$value ;;
        esac
    done < <("$1" -m pip config list 2>/dev/null)
}

find_python() {  # find_python 3.13: python3.13 on PATH, else pyenv's copy; nothing when neither runs
    local p
    for p in "$(command -v "python$1" || true)" "$HOME"/.pyenv/versions/"$1".*/bin/"python$1"; do
        if [[ -x $p ]] && "$p" -V >/dev/null 2>&1; then echo "$p"; return; fi
    done
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

run_pytest() {  # run_pytest VENV [pytest args]: Jupyter and TorchServe write to $HOME and $TMPDIR, kept in a scratch dir
    local venv=$1 scratch rc=0 pip_cache=${PIP_CACHE_DIR:-$HOME/.cache/pip} uv_cache=${UV_CACHE_DIR:-$HOME/.cache/uv}
    shift
    scratch=$(mktemp -d "${TMPDIR:-/tmp}/msnb-test.XXXXXX")
    mkdir -p "$scratch/home" "$scratch/tmp" artifacts
    # pip and uv keep their usual caches: the install tier's fresh venvs (pip, as a user installs) reuse what runs
    # before downloaded, and the environments a test prepares (tests/venvs.py: uv, with pip's settings) link from it.
    (
        uv_settings "$venv/bin/python"
        HOME=$scratch/home TMPDIR=$scratch/tmp MSNB_ARTIFACTS=$ROOT/artifacts PIP_CACHE_DIR=$pip_cache \
            UV_CACHE_DIR=$uv_cache MSNB_TEST_UV=$venv/bin/uv \
            "$venv/bin/python" -m pytest -n 2 --dist loadgroup --no-loadscope-reorder -p no:cacheprovider \
            --durations=50 "$@"
    ) || rc=$?
    rm -rf "$scratch"
    return $rc
}

# What the other tested Pythons run: the tiers whose subject is the Python version (msnb's own modules, archives, the
# install into a fresh venv, and the magics capturing cells in a real shell); the rest of the kernel tier drives
# TorchServe and Ray, which the main Python covers.
OTHER_PYTHON_TESTS="tests/unit tests/spine tests/install tests/kernel/test_magics.py tests/kernel/test_magics_as_typed.py tests/kernel/test_runtime_values.py"

other_pythons() {  # OTHER_PYTHON_TESTS on each other tested Python (TEST_PYTHONS)
    local v py rc=0
    for v in $TEST_PYTHONS; do
        py=$(find_python "$v")
        if [[ -z $py ]]; then echo "== python$v not found: its tiers did not run" >&2; rc=1; continue; fi
        setup_venv "$ROOT/.venv-$v" "$py" test
        echo "== Python $v: $OTHER_PYTHON_TESTS (set up and run beside the main run)"
        # shellcheck disable=SC2086  # the list splits into paths
        run_pytest "$ROOT/.venv-$v" -n 1 -m "not one_python" $OTHER_PYTHON_TESTS || rc=$?
    done
    return $rc
}

phase() {  # phase NAME: the wall time since the previous phase ended, so a run says where its minutes went
    echo "== $1 took $((SECONDS - PHASE_START)) s (total $SECONDS s)"
    PHASE_START=$SECONDS
}
PHASE_START=$SECONDS

cmd=${1:-}
shift || true
case "$cmd" in
    demo)
        check_java; setup_venv "$VENV" "$PY" test,docs
        exec "$VENV/bin/python" -m msnb.cli.demo "${@:-notebooks/quickstart.ipynb}" ;;
    test)
        check_java; setup_venv "$VENV" "$PY" test,docs; setup_browser
        phase "setup"
        others=""
        # Lint and format are part of the tests: CI fails on either.
        "$VENV/bin/ruff" check msnb tests bench templates
        "$VENV/bin/ruff" format --check msnb tests bench templates
        if [[ $# -gt 0 ]]; then run_pytest "$VENV" "$@"; exit; fi
        # The other Pythons' tiers run beside the main run, with their own venvs, scratch dirs and free ports: most of
        # a tier's time is waiting on Java, kernels and Ray, so the two overlap on two cores. Their output follows.
        other_log=$(mktemp "${TMPDIR:-/tmp}/msnb-other-pythons.XXXXXX")
        other_pythons > "$other_log" 2>&1 &
        others=$!
        # The docs: a broken link, a page missing from the nav or an API name that does not resolve fails.
        NO_MKDOCS_2_WARNING=1 "$VENV/bin/mkdocs" build --strict --quiet --site-dir "$ROOT/site"
        phase "ruff and the docs"
        rc=0
        run_pytest "$VENV" || rc=$?
        phase "every tier on $("$VENV/bin/python" -V)"
        wait "$others" || rc=1
        cat "$other_log"
        rm -f "$other_log"
        phase "the other Pythons' tiers, beyond the main run"
        exit $rc ;;
    bench)
        check_java; setup_venv "$VENV" "$PY" test,docs
        exec "$VENV/bin/python" -m bench "$@" ;;
    *)
        echo "usage: bash scripts/dev.sh demo|test|bench [args]" >&2
        exit 2 ;;
esac
