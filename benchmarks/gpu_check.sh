#!/usr/bin/env bash
# GPU checks for a machine with CUDA (any CUDA machine): a ticket extracted on the GPU re-evaluated on the
# CPU (the README promises agreement within 0.2 points), fp32 vs bf16 timings of a ConvNet, the GPU suite, and
# `ticket bench` on CUDA (dense, CSR, 2:4, blocks) for the paper MLP and ResNet-20, its tables in OUT_DIR/bench.
#
#   bash benchmarks/gpu_check.sh [OUT_DIR]        # about 8 minutes on one modern GPU
set -euo pipefail
out=${1:-gpu-check}
mkdir -p "$out"
python3 -c "import torch; assert torch.cuda.is_available(), 'no CUDA here'; print(torch.cuda.get_device_name(0))"

# 1. paper protocol on the GPU, then re-evaluated on the CPU
python3 -m ticketcli extract --method augmented --device cuda --out "$out/gpu.safetensors" --force --quiet --json \
    > "$out/extract-gpu.json"
python3 -m ticketcli evaluate "$out/gpu.safetensors" --device cpu --json > "$out/eval-cpu.json"
python3 - "$out" <<'EOF'
import json, sys
d = sys.argv[1]
e, c = json.load(open(f"{d}/extract-gpu.json")), json.load(open(f"{d}/eval-cpu.json"))
g, p = e["metrics"]["test"]["accuracy"], c["metrics"]["test"]["accuracy"]
print(f"augmented, FashionMNIST: test on GPU {100 * g:.2f}%, re-evaluated on CPU {100 * p:.2f}% "
      f"(difference {100 * abs(g - p):.3f} points; promise <= 0.2); GPU wall {e['wall_time_s']:.1f} s")
EOF

# 2. conv6 on synthetic-free data: fp32 vs bf16 autocast (digits is too small; FashionMNIST 1x28x28 is enough)
for p in fp32 bf16; do
  python3 -m ticketcli extract --method augmented --model conv6 --epochs 10 --device cuda --precision $p \
      --out "$out/conv6-$p.safetensors" --force --quiet --json > "$out/conv6-$p.json"
  python3 - "$out/conv6-$p.json" $p <<'EOF'
import json, sys
e = json.load(open(sys.argv[1]))
print(f"conv6 10 epochs {sys.argv[2]}: test {100 * e['metrics']['test']['accuracy']:.2f}%, "
      f"training {e['wall_time_s']:.1f} s")
EOF
done

# 3. the tests that need a GPU
python3 -m pytest -q tests/test_distributed.py -k gpu
python3 -m pytest -q tests/test_masked_step.py -k gpu

# 4. ticket bench on CUDA: dense against CSR (the sparse form), 2:4 semi-structured and 4x4 blocks, on the paper MLP
# and ResNet-20 (FashionMNIST, sized to it). Random masks (the speed depends on the pattern, not on which weights
# are kept): unstructured at 95%, --structure 2:4 (50%), --block 4x4 at 90%. A structure a model cannot take is
# one line and skipped (ResNet-20's stem convolution has 9 inputs per output: no 2:4). Tables, plots and one JSON
# document per model in $out/bench.
bench="$out/bench"
mkdir -p "$bench"
for model in mlp:784-256-256-256-10 resnet20; do
  tag=${model%%:*}
  for t in u95 2of4 4x4; do
    case $t in
      u95) shape=(--sparsity 0.95) ;;
      2of4) shape=(--structure 2:4) ;;
      4x4) shape=(--block 4x4 --sparsity 0.9) ;;
    esac
    rm -f "$bench/$tag-$t.safetensors"  # a ticket an earlier run left must not stand in for a refused one
    if ! python3 -m ticketcli extract --method random --model "$model" "${shape[@]}" --device cuda \
        --out "$bench/$tag-$t.safetensors" --force --quiet > /dev/null; then
      echo "skipped: $model ${shape[*]} (refused above)"
      continue
    fi
    python3 -m ticketcli bench "$bench/$tag-$t.safetensors" --device cuda --batch 1,256,4096 --repeats 20 \
        --plot "$bench/$tag-$t.png" --force --quiet | tee "$bench/$tag-$t.txt"
  done
  python3 -m ticketcli bench "$bench"/"$tag"-*.safetensors --device cuda --batch 1,256,4096 --repeats 10 --json \
      --quiet > "$bench/$tag.json"
done
