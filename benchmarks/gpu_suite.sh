#!/usr/bin/env bash
# The whole GPU check in one run: the `gpu` test tier, then the GPU benchmarks, each side
# by side with its baseline in the same run. Made for a lent machine with one GPU and a
# short lease: at most GPU_SUITE_SECONDS (450) for the steps, each with its own limit;
# the most important come first.
#
# Prepare on a machine with PyPI (the GPU machine reaches nothing outside):
#   bash benchmarks/gpu_wheels.sh                      # KServe & co. for Python 3.12, ~23 MB
#   mkdir -p build/gpu/data && cp "$FASHION_MNIST_DIR"/*.gz build/gpu/data/   # 31 MB
# Run there, from the repository root (the device tool: carry ["build/gpu"], timeout 600):
#   bash benchmarks/gpu_suite.sh
#
# Needs there: python3 with torch, torchvision, numpy, pytest, requests (the image's);
# nvidia-smi. Installs nothing else: the carried wheels go to /tmp/site on PYTHONPATH.
# Writes to $OUT (default build/gpu/out): summary.md (the figures against the targets),
# results.json (all numbers), logs.txt (every step's output), pytest.xml, and
# smi-default.csv / smi-graphs.csv (nvidia-smi samples while training).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-build/gpu/out}
PY=${PYTHON:-python3}
WORK=$(mktemp -d)
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 FASHION_MNIST_DIR=${FASHION_MNIST_DIR:-$PWD/build/gpu/data}
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
if compgen -G "build/gpu/wheels/*.whl" >/dev/null; then
  $PY -m pip install -q --no-index --no-deps --no-compile --target /tmp/site build/gpu/wheels/*.whl \
    && export PYTHONPATH=$PYTHONPATH:/tmp/site   # ahead of the image's: KServe's protobuf, grpcio
fi

# step NAME SECONDS COMMAND...: run with a time limit (cut to what is left of the whole
# suite's DEADLINE), log to logs.txt, note the exit code (124: stopped at its limit).
DEADLINE=${GPU_SUITE_SECONDS:-450}
step() {
  local name=$1 limit=$2 started=$SECONDS
  shift 2
  if ((limit > DEADLINE - SECONDS)); then limit=$((DEADLINE - SECONDS)); fi
  if ((limit < 15)); then
    echo "$name exit=skipped seconds=0" | tee -a "$WORK/steps.txt"
    return
  fi
  echo "=== $name: $*" | tee -a "$OUT/logs.txt"
  timeout --kill-after 10 "$limit" "$@" >"$WORK/$name.log" 2>&1
  local code=$?
  tee -a "$OUT/logs.txt" <"$WORK/$name.log" | tail -n 25
  echo "$name exit=$code seconds=$((SECONDS - started))" | tee -a "$WORK/steps.txt"
}

nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv \
  >"$WORK/gpu.txt" 2>&1
$PY -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name())" \
  >>"$WORK/gpu.txt" 2>&1
cat "$WORK/gpu.txt"

step tests 200 $PY -m pytest tests/gpu -m gpu --confcutdir tests/gpu -q -rA \
  -p no:cacheprovider --junitxml "$OUT/pytest.xml"
step throughput 150 $PY -m benchmarks.train_throughput --device cuda --samples 60000 \
  --repeats 1 --json "$WORK/throughput.json"
# Larger batches with the learning rate scaled (by the square root, and linearly).
step accuracy 150 $PY -m benchmarks.time_to_accuracy --device cuda --json "$WORK/accuracy.json" \
  --ours "" --ours "--precision fp32" --ours "--cuda-graphs" \
  --ours "--cuda-graphs --batch-size 256 --lr 0.0057" \
  --ours "--cuda-graphs --batch-size 512 --lr 0.008" \
  --ours "--cuda-graphs --batch-size 512 --lr 0.016"

# GPU utilisation while `python -m trainer` trains 10 epochs (nvidia-smi every 50 ms).
utilisation() {
  local name=$1
  shift
  nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv,noheader,nounits \
    -lms 50 >"$OUT/smi-$name.csv" 2>/dev/null &
  local smi=$!
  step "utilisation-$name" 60 $PY -m trainer --epochs 10 --log-interval 100000 "$@"
  kill "$smi" 2>/dev/null
  wait "$smi" 2>/dev/null
}
utilisation default --model-dir "$WORK/model"
utilisation graphs --cuda-graphs --model-dir "$WORK/model-graphs"

for device in cuda cpu; do
  for images in 1 64; do
    step "serving-$device-$images" 60 $PY benchmarks/serving_latency.py --model-dir "$WORK/model" \
      --device "$device" --images "$images" --requests 1000 --duration 5 \
      --json "$WORK/serving-$device-$images.json"
  done
done
step throughput-compile 120 $PY -m benchmarks.train_throughput --device cuda --samples 60000 \
  --repeats 1 --variants ours ours-compile --json "$WORK/compile.json"

$PY benchmarks/gpu_summary.py "$WORK" "$OUT" | tee "$OUT/summary.md"
rm -rf "$WORK"
