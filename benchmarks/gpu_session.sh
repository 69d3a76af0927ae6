#!/usr/bin/env bash
# Appendix 17's GPU work in three stages, each one device command of under 10 minutes. Run from
# the repository root of the GPU machine, where python3 has torch, sentencepiece, sacrebleu and
# tqdm. What it lacks travels in the ignored folder .gpu/, made here by `pack`: the corpus,
# platformdirs, the trained tokenizers, and the commit of this tree (there is no git there).
#
#   bash benchmarks/gpu_session.sh pack                  # here, once: fill .gpu/ to carry
#   bash benchmarks/gpu_session.sh search GRID [SECONDS] # trials on val -> results/trials.jsonl
#   bash benchmarks/gpu_session.sh final "TRAIN FLAGS" "RECORD FLAGS" "SHIP FLAGS"
#                                    # en-de and de-en: train, record -> results/{en-de,de-en}.json,
#                                    # ship -> src/transformer/weights/ beside the CPU models
#   bash benchmarks/gpu_session.sh bench                 # loop and step benchmarks -> results/
#
# Every stage copies what it wrote under results/ (and final, what ship wrote) to $OUT (when set),
# to be brought back and committed. TOY=1 runs a stage at toy size on the CPU (results, and a copy
# of the weights folder, in a temporary folder), to check the script before GPU time is spent.
set -euo pipefail
cd "$(dirname "$0")/.."
stage=${1:?"stage: pack, search, final or bench"}
shift
py=${PYTHON:-python3}
export PYTHONPATH=src:.gpu/site PYTHONUNBUFFERED=1 TQDM_MININTERVAL=15
export MULTI30K_DIR=${MULTI30K_DIR:-.gpu/multi30k} TRANSFORMER_CACHE=${TRANSFORMER_CACHE:-.gpu/cache}
if [ -f .gpu/provenance.env ]; then set -a; . .gpu/provenance.env; set +a; fi  # pack's commit
results=${RESULTS:-results}
weights=src/transformer/weights
toy=${TOY:-0}
if [ "$toy" = 1 ]; then
  results=$(mktemp -d)
  cp -r "$weights" "$results/weights" && weights=$results/weights
fi
runs=${RUNS:-runs}

bring_back() {  # copy what this stage wrote to $OUT (the device tool brings $OUT back)
  if [ -n "${OUT:-}" ]; then cp "$@" "$OUT"/; fi
}

case "$stage" in
pack)
  mkdir -p .gpu/multi30k .gpu/site
  cp "${SHARED_CORPUS:-../shared/data/multi30k}"/{SHA256SUMS,*.gz} .gpu/multi30k/
  # (without .gpu/site on the path, which would find the copy a previous pack made)
  site=$(PYTHONPATH=src "$py" -c "import platformdirs, pathlib; print(pathlib.Path(platformdirs.__file__).parent)")
  cp -r "$site" .gpu/site/
  # the tokenizers of the grids' vocabulary sizes, trained once here rather than in a trial
  "$py" -c "from transformer.tokenizer import multi30k_tokenizer as t; [t(v) for v in (4000, 8000, 16000)]"
  # the commit this tree is, for the provenance of what the GPU writes (it has no git there)
  dirty=0
  if [ -n "$(git status --porcelain --untracked-files=no)" ]; then dirty=1; fi
  printf 'TRANSFORMER_COMMIT=%s\nTRANSFORMER_DIRTY=%s\n' "$(git rev-parse HEAD)" "$dirty" >.gpu/provenance.env
  du -sh .gpu
  ;;
search)
  grid=${1:?"search needs a grid file"}
  stop_after=${2:-420}
  extra=()
  if [ "$toy" = 1 ]; then extra=(--max-sentences 20 --device cpu); fi
  "$py" -m transformer search "$grid" --out "$results/trials.jsonl" --runs "$runs/search" \
    --stop-after "$stop_after" "${extra[@]}"
  bring_back "$results/trials.jsonl"
  ;;
final)
  train_flags=${1:?"final needs the train flags"}
  record_flags=${2:-}
  ship_flags=${3:-}
  if [ "$toy" = 1 ]; then record_flags="$record_flags --max-sentences 20"; fi
  for pair in "en de" "de en"; do
    set -- $pair
    rm -rf "$runs/$1-$2"
    # shellcheck disable=SC2086  # the flags are words to split
    "$py" -m transformer train --src "$1" --tgt "$2" $train_flags --out "$runs/$1-$2"
    # shellcheck disable=SC2086
    "$py" -m transformer record "$runs/$1-$2" --out "$results/$1-$2.json" $record_flags
    # shellcheck disable=SC2086
    "$py" -m transformer ship "$runs/$1-$2" --out "$weights" $ship_flags
  done
  # the manifest (both kinds of model), and the weights and vocabularies ship wrote here
  shopt -s nullglob  # TOY=1 trains on the CPU: no *-gpu files
  bring_back "$results/en-de.json" "$results/de-en.json" "$weights/manifest.json" \
    "$weights"/*-gpu.safetensors "$weights"/*.model
  ;;
bench)
  device=cuda steps=200 warmup=20 compile=--compile loop_presets="small base" preset=base small=small
  extra=()
  if [ "$toy" = 1 ]; then  # the same scripts and flags, at a size a CPU runs in a minute
    device=cpu steps=12 warmup=2 compile="" loop_presets=tiny preset=tiny small=tiny
    extra=(--batches 1 --repeats 1)
  fi
  for loop_preset in $loop_presets; do
    # shellcheck disable=SC2086  # $compile is a flag or nothing
    "$py" benchmarks/train_loop.py --preset "$loop_preset" --device "$device" --steps "$steps" \
      --warmup "$warmup" $compile --startup --json "$results/benchmarks.json"
  done
  # shellcheck disable=SC2086
  "$py" benchmarks/train_step.py --preset "$preset" --device "$device" --amp $compile \
    "${extra[@]}" --json "$results/benchmarks.json"
  "$py" benchmarks/attention_kernels.py --device "$device" --preset "$small"
  bring_back "$results/benchmarks.json"
  ;;
*)
  echo "unknown stage $stage: pack, search, final or bench" >&2
  exit 2
  ;;
esac
