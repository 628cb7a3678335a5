#!/usr/bin/env bash
# GPU validation: on a machine with an NVIDIA GPU,
#   1. the collectors: trace every example with the cupti and the torch backend, replay both
#      (budget: 6 traces of up to 90 s each; about 1.5 minutes on one H200);
#   2. the what-ifs against real runs (scripts/whatif_truth.py --sizes realistic) on GPU-bound models of
#      realistic size: the cnn example (batch 256), a transformer of BERT-base size (12 blocks, width 768,
#      sequence 512, batch 8) and ResNet-50 on 224x224 images (batch 64); per model the fp32 baseline is
#      traced, amp, fused-optimizer, cuda-graphs, batch-size:factor=2, checkpoint, fuse-elementwise and
#      offload predicted, and each variant (bf16 autocast, fused AdamW/SGD, CUDA graphs, twice the batch,
#      checkpointing, torch.compile, save_on_cpu around each block) run for real and compared (at most
#      90 s a trace or prediction); each what-if's predicted peak memory against its real run's
#      torch.cuda.max_memory_allocated.
# It writes docs/gpu-validation.md (and $OUT/gpu-validation.md when $OUT is set) with both
# tables, keeping what it has when a part fails. Under 8 minutes in all: the what-if part gets what
# the collectors left of GPU_CHECK_DEADLINE (450 s from the start), a row that did not fit says so.
#
#   bash scripts/gpu_check.sh
#
# GPU_CHECK_TRACE_TIMEOUT (45) bounds each collector trace, GPU_CHECK_DEADLINE (450) the whole run, in seconds.
# With GPU_CHECK_KEEP=DIR every trace it records is kept in DIR (DIR/truth: the what-if runs).
# Without a GPU it exits 2 with one line.
# Needs python3 with torch (CUDA build). Installs cupti-python matching the CUDA major
# version when it is missing and the network allows; without it, the cupti rows say why.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export DAYDREAM_CACHE_DIR="$WORK/cache"

"$PY" - 2>/dev/null <<'PY' || { echo "gpu_check: no CUDA GPU visible to torch (needs python3 with a CUDA build of torch and a GPU)" >&2; exit 2; }
import torch, sys
assert torch.cuda.is_available(), "no CUDA device visible to torch"
print("gpu_check:", torch.cuda.get_device_name(0), "torch", torch.__version__, "CUDA", torch.version.cuda)
PY
"$PY" -c "import torch; print(f'{torch.cuda.get_device_name(0)}, torch {torch.__version__}, CUDA {torch.version.cuda}')" > "$WORK/device.txt"
date +%F >> "$WORK/device.txt"
for pair in numpy:numpy msgspec:msgspec click:click rich:rich yaml:pyyaml networkx:networkx numba:numba re2:google-re2; do
  "$PY" -c "import ${pair%%:*}" 2>/dev/null || "$PY" -m pip install -q "${pair#*:}" || true
done
if ! "$PY" -c "from cupti import cupti" 2>/dev/null; then
  major=$("$PY" -c "import torch; print((torch.version.cuda or '12').split('.')[0])")
  if [ "$major" -ge 13 ]; then spec="cupti-python>=13,<14"; else spec="cupti-python==12.8.0"; fi
  "$PY" -m pip install -q "$spec" || echo "gpu_check: could not install $spec; cupti rows will say so"
fi

for example in mlp cnn transformer; do
  for backend in cupti torch; do
    base="$WORK/$example-$backend"
    if timeout "${GPU_CHECK_TRACE_TIMEOUT:-45}" "$PY" -m daydream trace --backend "$backend" --warmup 3 --iterations 5 -o "$base.json.gz" \
         "examples/$example.py" -- --steps 30 > "$base.log" 2>&1; then
      "$PY" -m daydream inspect --json "$base.json.gz" > "$base.inspect.json" 2>> "$base.log" || true
      "$PY" -m daydream replay --json "$base.json.gz" > "$base.replay.json" 2>> "$base.log" || true
    fi
  done
done

left=$(( ${GPU_CHECK_DEADLINE:-450} - SECONDS - 15 ))  # 15 s for the summary and the copies
[ "$left" -gt 60 ] || left=60
timeout "$left" "$PY" scripts/whatif_truth.py --device cuda --sizes realistic --examples cnn,transformer,resnet \
    --warmup 3 --iterations 5 --budget 90 --out "$WORK/whatif.md" --keep "$WORK/truth" \
  || echo "| — | — | — | — | — | the what-if comparison stopped after ${left} s: the rows above are what fitted |" >> "$WORK/whatif.md"

"$PY" scripts/gpu_summary.py "$WORK"
if [ -n "${GPU_CHECK_KEEP:-}" ]; then
  mkdir -p "$GPU_CHECK_KEEP/truth"
  cp "$WORK"/*.json.gz "$WORK"/*.log "$WORK"/device.txt "$WORK"/whatif.md "$GPU_CHECK_KEEP/" 2>/dev/null || true
  cp "$WORK"/truth/*.json.gz "$WORK"/truth/*.peak "$GPU_CHECK_KEEP/truth/" 2>/dev/null || true
fi
