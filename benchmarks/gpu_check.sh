#!/usr/bin/env bash
# Checks for a CUDA machine: every CUDA path of the package, each step in its own time box, the whole within 8 minutes
# on one GPU, its logs and tables in one folder (OUT_DIR, default gpu-check):
#   env          torch, its CUDA and the GPU
#   tests        the tests that skip without CUDA, with -rs (on a CUDA machine a skip is a failure)
#   sparse-load  a --structure 2:4 and a --block 4x4 ticket of the paper MLP exported --format sparse (auto layout:
#                2:4 and BSR), loaded with tc.load_sparse(..., device="cuda") (also with measure=True, and the 2:4
#                ticket file itself, regenerated layer by layer): outputs against the ticket's network on CUDA
#                (float32 rounding; float16/TF32 rounding where a layer computes with the 2:4 kernels), each layer's
#                record (layout, kernel, form, why); fails where the 2:4 or BSR kernels do not run on CUDA
#   bench-*      `ticket bench` on CUDA, dense against CSR, BSR and 2:4 (not ONNX Runtime: it runs on the CPU): the
#                paper MLP unstructured at 95%, 2:4, and 4x4 blocks at 90%, a gpt-nano text ticket (--dataset text)
#                and ResNet-20 (FashionMNIST) at 95% and in 4x4 blocks (its 2:4 ticket is refused: the stem
#                convolution has 9 inputs per output). Random masks: the speed depends on the pattern, not on which
#                weights are kept. Tables, plots and JSON in OUT_DIR/bench; a form that disagrees with the ticket's
#                network, or on CUDA a structured form that does not run, fails the step
#   gpu-ticket   the paper protocol extracted on the GPU, re-evaluated on the CPU (the README promises agreement
#                within 0.2 points)
#   conv6-*      conv6, 10 epochs, fp32 against bf16 autocast
# Every step goes on after another fails; the end is a summary (OUT_DIR/summary.txt) of what passed, failed, ran out
# of its time box or was skipped and why. Exit status 1 when a step failed or timed out.
#
#   bash benchmarks/gpu_check.sh [OUT_DIR]             # on a CUDA machine: at most 8 minutes
#   bash benchmarks/gpu_check.sh --cpu [OUT_DIR]       # a dry run of the script: the same steps on the CPU with tiny
#                                                      # budgets (small splits, 1 epoch, batch 1 and 16, one thread;
#                                                      # 7 to 11 minutes on a busy 2-core machine), each CUDA-only
#                                                      # step or kernel saying "skipped: no CUDA"
# GPU_CHECK_DEVICE picks the device (default cuda; cuda:1 another GPU; cpu is --cpu); GPU_CHECK_BUDGET the total
# seconds (default 480 on CUDA, 1200 in a dry run): a step that would start past it is skipped, out of time;
# GPU_CHECK_ONLY a shell pattern of the steps to run (e.g. 'bench-mlp-*', to run a failed step again).
set -uo pipefail  # no -e: a failed step is recorded and the next one runs

dev=${GPU_CHECK_DEVICE:-cuda}
if [ "${1:-}" = "--cpu" ]; then
  dev=cpu
  shift
fi
out=${1:-gpu-check}
[ "$dev" = cpu ] && dry=1 || dry=0
budget=${GPU_CHECK_BUDGET:-$((dry ? 1200 : 480))}
mkdir -p "$out/logs" "$out/bench"
summary="$out/summary.txt"
: > "$summary"
threads="" small=""
if [ "$dry" = 1 ]; then
  threads="--threads 1"               # a dry run shares its CPU politely
  small="--n-extract 512 --n-val 256" # and extracts from small splits (the test split is the dataset's own)
fi
export dev dry out threads small
export PYTHONUNBUFFERED=1
SECONDS=0

# pick CUDA_SECONDS CPU_SECONDS: the first on a CUDA machine, the second in a dry run
pick() { if [ "$dry" = 1 ]; then echo "$2"; else echo "$1"; fi; }

# step NAME BOX COMMAND...: run COMMAND (a function below) for at most BOX seconds (less when the total budget
# is nearly spent), its output on the screen and in OUT_DIR/logs/NAME.log; exit status 77 is a skip whose reason is
# the last line printed
step() {
  local name=$1 box=$2 left rc t0 status
  shift 2
  # shellcheck disable=SC2053 # GPU_CHECK_ONLY is a pattern
  if [[ $name != ${GPU_CHECK_ONLY:-*} ]]; then
    printf '%-22s skipped: not in GPU_CHECK_ONLY\n' "$name" | tee -a "$summary"
    return
  fi
  left=$((budget - SECONDS))
  if [ "$left" -lt 20 ]; then
    printf '%-22s skipped: out of time (%s s budget spent)\n' "$name" "$budget" | tee -a "$summary"
    return
  fi
  [ "$box" -gt $((left - 10)) ] && box=$((left - 10)) # 10 s for a step that ignores SIGTERM to be killed
  echo "=== $name (time box $box s; $SECONDS s of $budget s gone)"
  t0=$SECONDS
  timeout --kill-after=10 "$box" bash -c '"$@"' step "$@" 2>&1 | tee "$out/logs/$name.log"
  rc=${PIPESTATUS[0]}
  case $rc in
    0) status="passed" ;;
    77) status=$(grep -v '^\s*$' "$out/logs/$name.log" | tail -n 1) ;;
    124 | 137) status="FAILED: timed out after $box s" ;;
    *) status="FAILED: exit status $rc (logs/$name.log)" ;;
  esac
  printf '%-22s %-70s %4d s\n' "$name" "$status" $((SECONDS - t0)) | tee -a "$summary"
}

need_cuda() {  # in a dry run, a CUDA-only step says so and is skipped
  if [ "$dry" = 1 ]; then
    echo "skipped: no CUDA${1:+ ($1)}"
    exit 77
  fi
}

env_check() {
  command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 - <<'EOF'
import os, sys
import torch
import ticketcli
dev = os.environ["dev"]
py = sys.version.split()[0]
print(f"ticketcli {ticketcli.__version__}, torch {torch.__version__} (CUDA {torch.version.cuda}), python {py}")
if torch.cuda.is_available():
    i = (torch.device(dev).index or 0) if dev.startswith("cuda") else 0
    print(f"GPU: {torch.cuda.get_device_name(i)}, capability {torch.cuda.get_device_capability(i)}")
if dev == "cpu":
    print("dry run: every step on the CPU with tiny budgets; the CUDA-only ones are skipped")
elif not torch.cuda.is_available():
    sys.exit("no CUDA here: `bash benchmarks/gpu_check.sh --cpu` checks the script on the CPU")
EOF
}

cuda_tests() {
  # the tests that need CUDA, by name: on a machine without it each is skipped and says why (-rs)
  local log="$out/logs/tests-pytest.txt"
  python3 -m pytest -q -n0 -rs -p no:cacheprovider \
    "tests/test_export_sparse_layouts.py::test_on_cuda_a_two_four_linear_layer_computes_semi_structured" \
    "tests/test_bench.py::test_the_two_of_four_form_runs_on_cuda" \
    "tests/test_masked_step.py::test_recomputed_effective_weights_on_the_gpu_give_the_plain_paths_gradients" \
    "tests/test_distributed.py::test_a_gpu_ticket_evaluates_on_the_cpu_within_a_fifth_of_a_point" | tee "$log"
  local rc=${PIPESTATUS[0]}
  [ "$rc" = 0 ] || exit "$rc"
  if grep -q ' skipped' "$log"; then
    if [ "$dry" = 1 ]; then
      echo "skipped: no CUDA (pytest skipped them, reasons above)"
      exit 77
    fi
    echo "a CUDA test was skipped on a CUDA machine (reasons above)"
    exit 1
  fi
}

sparse_load() {
  # a 2:4 and a 4x4 block ticket of the paper MLP (random masks), exported --format sparse with the auto layout
  local d="$out/sparse"
  mkdir -p "$d"
  python3 -m ticketcli extract --method random --structure 2:4 --device "$dev" $threads $small \
    --out "$d/nm.safetensors" --force --quiet > /dev/null || exit 1
  python3 -m ticketcli extract --method random --block 4x4 --sparsity 0.9 --device "$dev" $threads $small \
    --out "$d/blocks.safetensors" --force --quiet > /dev/null || exit 1
  for t in nm blocks; do
    python3 -m ticketcli export "$d/$t.safetensors" --format sparse --out "$d/$t-sparse.safetensors" --force \
      $threads --json > "$d/$t-export.json" || exit 1
  done
  python3 - "$d" <<'EOF'
import os, sys
import torch
import ticketcli as tc
from ticketcli.export.sparse.net import AGREEMENT

d, dev, dry = sys.argv[1], os.environ["dev"], os.environ["dry"] == "1"
if dry:
    torch.set_num_threads(1)
failed = []
# (ticket, what tc.load_sparse reads, its keywords, the kernel the layers must compute with on CUDA); load_sparse's
# device defaults to the CPU: it is named. measure=True times each layer again on the device; a ticket file is
# regenerated from its seed one layer at a time and measured there
cases = [
    ("nm", "nm-sparse", {}, "2:4"),
    ("blocks", "blocks-sparse", {}, "bsr"),
    ("blocks", "blocks-sparse", {"measure": True}, None),
    ("nm", "nm", {}, None),
]
for ticket, source, kwargs, kernel in cases:
    t = tc.load(f"{d}/{ticket}.safetensors")
    ref = t.build(dev)
    net = tc.load_sparse(f"{d}/{source}.safetensors", device=dev, **kwargs)
    x, y = t.splits().test
    x, y = x.to(dev), y.to(dev)
    with torch.no_grad():
        want, got = ref(x), net(x)
    kernels = [r.computes for r in net.layers]
    # torch's 2:4 kernels compute in float16 (or in float32 through TF32): agreement to their rounding, not
    # float32's, and a prediction may flip where two logits lie closer than that
    half = "2:4" in kernels
    tol = 1e-2 if half else AGREEMENT
    diff = float((want - got).abs().max()) / max(float(want.abs().max()), 1e-30)
    acc_want, acc_got = (float((o.argmax(1) == y).float().mean()) for o in (want, got))
    ok = diff <= tol and (half or abs(acc_want - acc_got) <= 1e-3)
    what = f"{source}.safetensors" + "".join(f", {k}={v}" for k, v in kwargs.items())
    print(f"{what} ({net.source}, layout {net.metadata.get('layout', 'csr')}) on {net.device}: largest difference "
          f"{diff:.2e} of the largest logit (tolerance {tol:g}), test accuracy {acc_got:.2%} against the "
          f"ticket's {acc_want:.2%}: {'agrees' if ok else 'DISAGREES'}")
    for r in net.layers:
        print(f"  {r.name:9} {r.kind:6} {'x'.join(map(str, r.shape)):8} layout {r.stored}, kernel {r.computes}, "
              f"form {r.form}: {r.reason}")
    if not ok:
        failed.append(f"{what}: outputs disagree")
    if kernel is not None and kernel not in kernels:
        if dry:
            print(f"  {kernel} kernels: skipped: no CUDA (the layers fell back, the records say why)")
        else:
            failed.append(f"{what}: no layer computes with the {kernel} kernels on {dev} (the records say why)")
if failed:
    sys.exit("; ".join(failed))
EOF
}

# bench_one MODEL TAG SHAPE ARGS...: a random ticket of MODEL, then `ticket bench` on it; its JSON, its plot and a
# table in OUT_DIR/bench/TAG.*; fails where an available form disagrees, or (on CUDA) where the form the ticket's
# masks are for (bsr, 2:4) does not run
bench_one() {
  local model=$1 tag=$2 expect=$3
  shift 3
  local b="$out/bench"
  rm -f "$b/$tag.safetensors" "$b/$tag.json" # a ticket an earlier run left must not stand in for a refused one
  if ! python3 -m ticketcli extract --method random --model "$model" "$@" --device "$dev" $threads $small \
    --out "$b/$tag.safetensors" --force --quiet > /dev/null; then
    echo "skipped: $model $* refused (the line above)"
    exit 77
  fi
  python3 -m ticketcli bench "$b/$tag.safetensors" --device "$dev" $threads --forms sparse,bsr,2:4 \
    --batch "$(pick 1,256,4096 1,16)" --repeats "$(pick 20 3)" --plot "$b/$tag.png" --force --quiet \
    --json > "$b/$tag.json" || exit 1
  python3 - "$b/$tag.json" "$expect" <<'EOF' | tee "$b/$tag.txt"
import json, os, sys
doc, expect = json.load(open(sys.argv[1])), sys.argv[2]
dry = os.environ["dry"] == "1"
t = doc["tickets"][0]
print(f"{t['ticket']}: {t['model']}, sparsity {t['sparsity']:.2%}, on {doc['device']}, {doc['repeats']} repeats")
bad = []
for f in t["forms"]:
    if not f["available"]:
        print(f"  {f['name']:6} not available: {f['reason']}")
        if f["name"] == expect:
            if dry:
                print(f"  {expect}: skipped: no CUDA")
            else:
                bad.append(f"{expect} did not run on {doc['device']}")
        continue
    a = f["agreement"]
    times = "  ".join(f"b{x['batch']} {1e6 * x['median_s']:.0f} us ({x['speedup']:.2f}x)" for x in f["timings"])
    print(f"  {f['name']:6} diff {a['max_abs_diff']:.1e} ({'agrees' if a['agrees'] else 'DISAGREES'}), "
          f"accuracy {a['accuracy']:.2%}, file {f['file_bytes']} B | {times}")
    if not a["agrees"]:
        bad.append(f"{f['name']} disagrees with the ticket's network")
for v in t["verdict"]:
    print(f"  batch {v['batch']}: {v['fastest']} fastest ({v['speedup']:.2f}x dense), recommended {v['recommended']}")
if bad:
    sys.exit("; ".join(bad))
EOF
  exit "${PIPESTATUS[0]}"
}

gpu_ticket() {
  # the paper protocol on the device, then re-evaluated on the CPU (a dry run: 1 epoch)
  local short=""
  [ "$dry" = 1 ] && short="--epochs 1"
  python3 -m ticketcli extract --method augmented --device "$dev" $threads $small $short \
    --out "$out/gpu.safetensors" --force --quiet --json > "$out/extract-gpu.json" || exit 1
  python3 -m ticketcli evaluate "$out/gpu.safetensors" --device cpu $threads --json > "$out/eval-cpu.json" || exit 1
  python3 - "$out" <<'EOF'
import json, sys
d = sys.argv[1]
e, c = json.load(open(f"{d}/extract-gpu.json")), json.load(open(f"{d}/eval-cpu.json"))
g, p = e["metrics"]["test"]["accuracy"], c["metrics"]["test"]["accuracy"]
print(f"augmented, FashionMNIST: test on {e['device']} {100 * g:.2f}%, re-evaluated on CPU {100 * p:.2f}% "
      f"(difference {100 * abs(g - p):.3f} points; promise <= 0.2); wall {e['wall_time_s']:.1f} s")
sys.exit(0 if abs(g - p) <= 0.002 else "the promise is broken")
EOF
}

conv6() {  # conv6 at one precision: fp32 or bf16 (autocast; on CUDA only)
  local p=$1
  [ "$p" = bf16 ] && need_cuda "bf16 autocast is measured on a GPU"
  local epochs
  epochs=$(pick 10 1)
  python3 -m ticketcli extract --method augmented --model conv6 --epochs "$epochs" --device "$dev" $threads $small \
    --precision "$p" --out "$out/conv6-$p.safetensors" --force --quiet --json > "$out/conv6-$p.json" || exit 1
  python3 - "$out/conv6-$p.json" "$p" "$epochs" <<'EOF'
import json, sys
e = json.load(open(sys.argv[1]))
print(f"conv6, {sys.argv[3]} epoch(s), {sys.argv[2]} on {e['device']}: "
      f"test {100 * e['metrics']['test']['accuracy']:.2f}%, training {e['wall_time_s']:.1f} s")
EOF
}

export -f pick need_cuda env_check cuda_tests sparse_load bench_one gpu_ticket conv6

if [ "$dry" = 0 ] && ! python3 -c "import torch, sys; sys.exit(not torch.cuda.is_available())"; then
  step env 60 env_check  # fails and says why; every other step needs CUDA
  for s in tests sparse-load bench gpu-ticket conv6; do
    printf '%-22s skipped: no CUDA\n' "$s" | tee -a "$summary"
  done
else
  step env 60 env_check
  step tests "$(pick 150 150)" cuda_tests
  step sparse-load "$(pick 60 120)" sparse_load
  mlp=mlp:784-256-256-256-10
  step bench-mlp-u95 "$(pick 45 60)" bench_one $mlp mlp-u95 sparse --sparsity 0.95
  step bench-mlp-2of4 "$(pick 45 60)" bench_one $mlp mlp-2of4 2:4 --structure 2:4
  step bench-mlp-4x4 "$(pick 45 60)" bench_one $mlp mlp-4x4 bsr --block 4x4 --sparsity 0.9
  step bench-gpt-nano "$(pick 45 60)" bench_one gpt-nano:l2-d64-h4-c64 gpt-u90 sparse --dataset text --sparsity 0.9
  step bench-resnet20-u95 "$(pick 60 300)" bench_one resnet20 resnet20-u95 sparse --sparsity 0.95
  step bench-resnet20-2of4 "$(pick 30 30)" bench_one resnet20 resnet20-2of4 2:4 --structure 2:4
  step bench-resnet20-4x4 "$(pick 60 300)" bench_one resnet20 resnet20-4x4 bsr --block 4x4 --sparsity 0.9
  step gpu-ticket "$(pick 60 60)" gpu_ticket
  step conv6-fp32 "$(pick 60 120)" conv6 fp32
  step conv6-bf16 "$(pick 60 60)" conv6 bf16
fi

echo "=== summary ($SECONDS s; device $dev; logs and tables in $out)"
cat "$summary"
! grep -q FAILED "$summary"
