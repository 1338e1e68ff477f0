#!/usr/bin/env bash
# ray-serve.sh — nibble on Ray Serve on this machine (examples/ray): installs what it needs (scripts/setup.sh
# --no-extra-ort, which puts the pinned ray[serve] into .venv), builds libnibble_ort.so and nibble-serve, converts
# SmolLM2-135M-Instruct (scripts/convert-smollm2.sh), then starts a private local Ray cluster and deploys N replicas,
# each supervising one nibble-serve, behind Ray's HTTP proxy with OpenAI's routes at the root
# (http://127.0.0.1:P/v1/chat/completions, /v1/models; the chat page at /). Prints the URL and stays in the
# foreground; SIGINT (Ctrl-C) / SIGTERM shut the deployment and the Ray processes it started down, and it checks
# that none is left.
#
#   scripts/ray-serve.sh                                   127.0.0.1:8000, 1 replica with all CPUs
#   scripts/ray-serve.sh --port 9000 --replicas 2          2 replicas, the CPUs split between them
#   scripts/ray-serve.sh --model DIR                       any model directory (models/LLAMA_MODEL_DIR.md)
# Several machines: examples/ray/README.md (ray start --head / --address, serve deploy examples/ray/serve-config.yaml).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
LOCKED=()
[ -f Cargo.lock ] && LOCKED=(--locked)
die() { printf 'ray-serve.sh: %s\n' "$*" >&2; exit 2; }
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }

port=8000 replicas=1 model=""
while [ $# -gt 0 ]; do
    case "$1" in
        --port) [ $# -ge 2 ] || die "--port needs a value"; port=$2; shift 2 ;;
        --port=*) port=${1#*=}; shift ;;
        --replicas) [ $# -ge 2 ] || die "--replicas needs a value"; replicas=$2; shift 2 ;;
        --replicas=*) replicas=${1#*=}; shift ;;
        --model) [ $# -ge 2 ] || die "--model needs a value"; model=$2; shift 2 ;;
        --model=*) model=${1#*=}; shift ;;
        -h|--help) usage; exit 0 ;;
        *) die "unknown option $1 (options: --port P, --replicas N, --model DIR)" ;;
    esac
done
[[ $port =~ ^[0-9]+$ ]] && [ "$port" -ge 1 ] && [ "$port" -le 65535 ] || die "--port must be 1..65535, not '$port'"
[[ $replicas =~ ^[0-9]+$ ]] && [ "$replicas" -ge 1 ] || die "--replicas must be a whole number >= 1, not '$replicas'"
if [ -n "$model" ]; then
    model=$(cd "$model" 2>/dev/null && pwd) || die "--model: no directory $model"
    [ -f "$model/model.onnx" ] || die "--model: $model has no model.onnx (models/LLAMA_MODEL_DIR.md)"
fi

# shellcheck source=scripts/prepare.sh
source scripts/prepare.sh
check_prerequisites
prepare
cpus=$(nproc)
[ "$replicas" -le "$cpus" ] ||
    echo "ray-serve.sh: $replicas replicas on $cpus CPUs: each gets 1 thread and they share the CPUs" >&2
echo "==> Ray Serve: $replicas replica(s) of nibble-serve on a local Ray cluster (Ctrl-C stops it and the cluster)"
args=(--port "$port" --replicas "$replicas" --num-cpus "$(( cpus > replicas ? cpus : replicas ))")
[ -n "$model" ] && args+=(--model "$model")
exec "$ROOT/.venv/bin/python" examples/ray/run_local.py "${args[@]}"
