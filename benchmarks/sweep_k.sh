#!/usr/bin/env bash
# Section 6.3 / Figure 2 (docs/method.md): hyperparameter-stability sweep, FashionMNIST, requested 90%, seeds 0,1,2.
# Paper protocol: 100 epochs per run (EPOCHS=100); 12 scalar densities + 8 layerwise tuples per seed, fixed
# edge-popup, random, and every double-scoring variant in the registry. Resumable: finished runs in OUT are kept.
# Usage: benchmarks/sweep_k.sh [OUT_DIR]   (env: EPOCHS, SEEDS, WORKERS, THREADS)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-sweep-fashion}
mkdir -p "$OUT"
python -m ticketcli sweep-k --dataset fashion-mnist --sparsity 0.9 --seeds "${SEEDS:-0,1,2}" --layerwise 8 \
  --epochs "${EPOCHS:-100}" --workers "${WORKERS:-2}" --threads "${THREADS:-1}" --device cpu \
  --out-dir "$OUT/runs" --plot "$OUT/stability.png" --json > "$OUT/stability.json"
python - "$OUT/stability.json" <<'EOF'
import json, sys
from dataclasses import replace
from ticketcli.report.study_tables import sweep_table
from ticketcli.sweep.result import SweepRecord, SweepResult, SweepSettings
doc = json.load(open(sys.argv[1]))  # the --json document, back as the typed result its table reads
st = doc["settings"]
records = [SweepRecord.from_document(r) for r in doc["records"]]
result = SweepResult.of(records, doc["resumed"], tuple(st["band"]))
settings = SweepSettings(**{**st, **{k: tuple(st[k]) for k in ("seeds", "densities", "band", "double_scoring")}})
sweep_table(replace(result, settings=settings))
EOF
