#!/usr/bin/env bash
# GPU validation: on a machine with an NVIDIA GPU,
#   1. the collectors: trace every example with the cupti and the torch backend, replay both
#      (budget: 6 traces of up to 90 s each; about 1.5 minutes on one H200);
#   2. the what-ifs against real runs (scripts/whatif_truth.py): per example, trace the fp32
#      baseline, predict amp, fused-optimizer, cuda-graphs, batch-size:factor=2 and checkpoint,
#      run each variant for real and compare (budget: 18 traces and 15 predictions of up to
#      90 s each; about 4 minutes on one H200).
# It writes docs/gpu-validation.md (and $OUT/gpu-validation.md when $OUT is set) with both
# tables, keeping what it has when a part fails. Under 8 minutes in all on one H200.
#
#   bash scripts/gpu_check.sh
#
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
for module in numpy msgspec click rich yaml networkx numba; do
  "$PY" -c "import $module" 2>/dev/null || "$PY" -m pip install -q "$( [ $module = yaml ] && echo pyyaml || echo $module )" || true
done
if ! "$PY" -c "from cupti import cupti" 2>/dev/null; then
  major=$("$PY" -c "import torch; print((torch.version.cuda or '12').split('.')[0])")
  if [ "$major" -ge 13 ]; then spec="cupti-python>=13,<14"; else spec="cupti-python==12.8.0"; fi
  "$PY" -m pip install -q "$spec" || echo "gpu_check: could not install $spec; cupti rows will say so"
fi

for example in mlp cnn transformer; do
  for backend in cupti torch; do
    base="$WORK/$example-$backend"
    if timeout 90 "$PY" -m daydream trace --backend "$backend" --warmup 3 --iterations 5 -o "$base.json.gz" \
         "examples/$example.py" -- --steps 30 > "$base.log" 2>&1; then
      "$PY" -m daydream inspect --json "$base.json.gz" > "$base.inspect.json" 2>> "$base.log" || true
      "$PY" -m daydream replay --json "$base.json.gz" > "$base.replay.json" 2>> "$base.log" || true
    fi
  done
done

timeout 330 "$PY" scripts/whatif_truth.py --device cuda --budget 90 --out "$WORK/whatif.md" \
  || echo "| — | — | — | — | — | the what-if comparison stopped: see the log above |" >> "$WORK/whatif.md"

"$PY" - "$WORK" <<'PY'
import json, os, sys, datetime, pathlib
work = pathlib.Path(sys.argv[1])
import torch
rows = []
for example in ("mlp", "cnn", "transformer"):
    for backend in ("cupti", "torch"):
        base = work / f"{example}-{backend}"
        inspect = base.with_suffix(".inspect.json")
        replay = base.with_suffix(".replay.json")
        if not inspect.exists() or not replay.exists():
            log = base.with_suffix(".log").read_text().strip().splitlines() if base.with_suffix(".log").exists() else ["no log"]
            rows.append(f"| {example} | {backend} | — | — | — | — | failed: {log[-1][:120]} |")
            continue
        rank = json.loads(inspect.read_text())["ranks"][0]
        errors = [it["error"] for it in json.loads(replay.read_text())["ranks"][0]["iterations"]]
        share = rank["attribution"]["forward_leaf_share"]
        rows.append(f"| {example} | {backend} | {rank['kernels']} | {len(rank['iterations'])} | {share:.0%} | "
                    f"{max(errors) * 100:.2f}% | {rank['linking']['linked_to_op']}/{rank['linking']['gpu_activities']} linked |")
text = "\n".join([
    "# GPU validation",
    "",
    f"`bash scripts/gpu_check.sh` on {torch.cuda.get_device_name(0)}, torch {torch.__version__}, CUDA {torch.version.cuda},",
    f"{datetime.date.today().isoformat()}. Each example traced with `--warmup 3 --iterations 5`.",
    "",
    "| example | backend | kernels | iterations | forward time on a leaf module | worst replay error | GPU work linked to an op |",
    "|---|---|---:|---:|---:|---:|---|",
    *rows,
    "",
    "## What-ifs against real runs",
    "",
    "Per example, the fp32 baseline (`--optim loop`) traced once with the torch backend; each what-if predicted from",
    "that trace; each variant (`--amp bf16`, `--optim fused`, `--cuda-graphs`, twice the batch, `--checkpoint`) run and",
    "traced for real; measured = the median of its recorded iterations (`scripts/whatif_truth.py`). The Daydream",
    "paper's bar: AMP and fused optimizers within 13%.",
    "",
    (work / "whatif.md").read_text() if (work / "whatif.md").exists() else "(the what-if comparison did not run)",
]) + "\n"
print(text)
pathlib.Path("docs/gpu-validation.md").write_text(text)
if os.environ.get("OUT"):
    pathlib.Path(os.environ["OUT"], "gpu-validation.md").write_text(text)
PY
