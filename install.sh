#!/usr/bin/env bash
# Install `ticket` into a virtual environment: the one already active ($VIRTUAL_ENV), else .venv beside this file
# (created, or reused when it exists). Only what the main job needs goes in (torch, torchvision and the package's
# own dependencies); extras only on request. Nothing outside the environment is installed or upgraded, except, as
# root on Debian, the python3-venv package when `python3 -m venv` cannot work without it, and the paper's dataset
# (dataset-fashion-mnist) unless --no-data. Each phase prints the environment's size after it.
#
#   bash install.sh                         # .venv with torch and ticket
#   bash install.sh --extras onnx,track     # ... and export --format onnx, --log-to (also: ray, docs, dev, test)
#   bash install.sh --torch-index https://download.pytorch.org/whl/cpu   # a CPU-only torch build (about 4 GB less)
#   bash install.sh --dry-run               # print what would be done, do nothing
set -euo pipefail
CALLER=$PWD  # a relative --venv is relative to where the script was called from
cd "$(dirname "$0")"
ROOT=$PWD

TORCH_PINS=(torch==2.14.1 torchvision==0.29.1)
KNOWN_EXTRAS=" dev test ray onnx track docs "
PY=${PYTHON:-python3}
VENV=""
EXTRAS=""
TORCH_INDEX=""
DATA=1
DRY=0

usage() {
  sed -n '2,/^[^#]/{/^#/p}' "$0" | sed 's/^# \{0,1\}//'
  cat <<'EOF'

options:
  --venv DIR           the environment to create or reuse (default: the active one, else .venv here)
  --extras A,B         extras to install as well: dev, test, ray, onnx, track, docs (default: none)
  --torch-index URL    the package index torch comes from (e.g. https://download.pytorch.org/whl/cpu)
  --python PY          the Python that creates the environment (default: $PYTHON, else python3)
  --no-data            do not install the dataset-fashion-mnist package (root with apt only)
  --dry-run            print each phase's commands without running them
  -h, --help           this help
EOF
}

die() { echo "install.sh: error: $*" >&2; exit 2; }

while [ $# -gt 0 ]; do
  case $1 in
    --venv) [ $# -ge 2 ] || die "--venv needs a folder"; VENV=$2; shift 2 ;;
    --venv=*) VENV=${1#*=}; shift ;;
    --extras) [ $# -ge 2 ] || die "--extras needs a list, e.g. onnx,track"; EXTRAS=$2; shift 2 ;;
    --extras=*) EXTRAS=${1#*=}; shift ;;
    --torch-index) [ $# -ge 2 ] || die "--torch-index needs a URL"; TORCH_INDEX=$2; shift 2 ;;
    --torch-index=*) TORCH_INDEX=${1#*=}; shift ;;
    --python) [ $# -ge 2 ] || die "--python needs an interpreter"; PY=$2; shift 2 ;;
    --python=*) PY=${1#*=}; shift ;;
    --no-data) DATA=0; shift ;;
    --dry-run) DRY=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown option $1 (see bash install.sh --help)" ;;
  esac
done

EXTRAS=${EXTRAS// /}
if [ -n "$EXTRAS" ]; then
  IFS=, read -r -a wanted <<<"$EXTRAS"
  for e in "${wanted[@]}"; do
    [ -n "$e" ] || die "--extras $EXTRAS holds an empty name"
    case $KNOWN_EXTRAS in *" $e "*) ;; *) die "unknown extra '$e' (extras:$KNOWN_EXTRAS)" ;; esac
  done
fi

if [ -z "$VENV" ]; then
  VENV=${VIRTUAL_ENV:-$ROOT/.venv}
fi
[ "$VENV" = "${VENV#/}" ] && VENV=$CALLER/$VENV  # absolute, so that the last line names it exactly
VPY=$VENV/bin/python

run() {  # a command, echoed; only echoed with --dry-run
  echo "+ $*"
  [ "$DRY" = 1 ] || "$@"
}

size() {  # the environment's size after a phase
  local label=$1
  if [ "$DRY" = 1 ] || [ ! -d "$VENV" ]; then
    echo "== $label"
  else
    echo "== $label: $VENV is $(du -sm "$VENV" | cut -f1) MB"
  fi
}

started=$(date +%s)
echo "== installing ticket into $VENV${EXTRAS:+ with extras $EXTRAS}"

# phase 1: the environment (created, or reused when it already has a Python)
if [ -x "$VPY" ]; then
  echo "reusing the environment $VENV"
elif [ "$DRY" = 1 ]; then
  run "$PY" -m venv "$VENV"
elif ! "$PY" -m venv "$VENV" 2>/tmp/ticket-venv.$$; then
  # Debian ships venv (ensurepip) in a package of its own: install it when we may, else say what to run
  cat /tmp/ticket-venv.$$ >&2
  rm -rf "$VENV"
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    ver=$("$PY" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq "python$ver-venv" || apt-get install -y -qq python3-venv
    "$PY" -m venv "$VENV"
  else
    rm -f /tmp/ticket-venv.$$
    die "$PY -m venv failed; install the python3-venv package (as root: apt-get install python3-venv) and rerun"
  fi
fi
rm -f /tmp/ticket-venv.$$
size "environment"

# phase 2: torch (its own index when asked: a CPU-only build where one can be had), unless it is already there
if [ "$DRY" = 0 ] && "$VPY" -c "import torch, torchvision" 2>/dev/null; then
  echo "torch is already installed in $VENV: kept"
else
  run "$VPY" -m pip install --disable-pip-version-check ${TORCH_INDEX:+--index-url "$TORCH_INDEX"} "${TORCH_PINS[@]}"
fi
size "torch"

# phase 3: ticket itself (editable: this checkout) and its light dependencies; torch and numpy stay as installed
constraints=$(mktemp)
trap 'rm -f "$constraints"' EXIT
if [ "$DRY" = 0 ]; then
  "$VPY" -m pip freeze 2>/dev/null | grep -iE '^(torch|torchvision|numpy)==' >"$constraints" || true
fi
run "$VPY" -m pip install --disable-pip-version-check -c "$constraints" -e "$ROOT"
size "ticket"

# phase 4: the extras asked for, pinned to what is installed above
if [ -n "$EXTRAS" ]; then
  run "$VPY" -m pip install --disable-pip-version-check -c "$constraints" -e "$ROOT[$EXTRAS]"
  size "extras $EXTRAS"
fi

# phase 5: the paper's dataset, as root on Debian (elsewhere `--download` fetches it, or --data-dir reads it)
if [ "$DATA" = 1 ] && [ ! -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    export DEBIAN_FRONTEND=noninteractive
    { run apt-get update -qq && run apt-get install -y -qq dataset-fashion-mnist; } \
      || echo "note: dataset-fashion-mnist not installed; use --download or --data-dir" >&2
  else
    echo "note: FashionMNIST comes from --download or --data-dir (not root, or no apt-get)"
  fi
fi

echo "== done in $(($(date +%s) - started)) s"
echo "ticket is $VENV/bin/ticket"
if [ "${VIRTUAL_ENV:-}" = "$VENV" ]; then
  echo "the environment is active: ticket is on PATH"
else
  echo "put it on PATH with: source $VENV/bin/activate"
fi
