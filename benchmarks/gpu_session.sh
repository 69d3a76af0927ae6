#!/usr/bin/env bash
# Appendix 17's GPU work, each stage one device command of under 10 minutes. Run from the
# repository root of the GPU machine, where python3 has torch, sentencepiece, sacrebleu and tqdm.
# What it lacks travels in the ignored folder .gpu/, made here by `pack`: the corpus,
# platformdirs, the trained tokenizers, and the commit of this tree (there is no git there).
#
#   bash benchmarks/gpu_session.sh pack           # here, once: fill .gpu/ to carry
#   bash benchmarks/gpu_session.sh all [RECIPE]   # the session in one call, ended by GUARD
#       (540) seconds: en-de and de-en trained at the same time on the one GPU with the
#       recipe (benchmarks/grids/gpu.json), recorded -> results/{en-de,de-en}.json and
#       shipped -> src/transformer/weights/ beside the CPU models; then bench, as far as
#       the guard allows; a log of it all in results/gpu-session.log
#   bash benchmarks/gpu_session.sh search GRID [SECONDS]  # trials on val -> results/trials.jsonl
#   bash benchmarks/gpu_session.sh bench          # loop and step benchmarks -> results/
#
# Every stage copies what it wrote under results/ (and all, what ship changed) to $OUT (when
# set), to be brought back and committed. TOY=1 runs a stage at toy size on the CPU (results,
# and a copy of the weights folder, in a temporary folder), to check the script before GPU time
# is spent.
set -euo pipefail
cd "$(dirname "$0")/.."
stage=${1:?"stage: pack, all, search or bench"}
shift
py=${PYTHON:-python3}
export PYTHONPATH=src:.gpu/site PYTHONUNBUFFERED=1 TQDM_MININTERVAL=15
export MULTI30K_DIR=${MULTI30K_DIR:-.gpu/multi30k} TRANSFORMER_CACHE=${TRANSFORMER_CACHE:-.gpu/cache}
if [ -f .gpu/provenance.env ]; then set -a; . .gpu/provenance.env; set +a; fi  # pack's commit
results=${RESULTS:-results}
weights=src/transformer/weights
toy=${TOY:-0}
if [ "$toy" = 1 ]; then  # one temporary folder, which a stage that `all` starts shares
  if [ -z "${TOY_RESULTS:-}" ]; then
    TOY_RESULTS=$(mktemp -d)
    export TOY_RESULTS
    cp -r "$weights" "$TOY_RESULTS/weights"
  fi
  results=$TOY_RESULTS weights=$TOY_RESULTS/weights
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
all)
  recipe=${1:-benchmarks/grids/gpu.json}
  deadline=$((SECONDS + ${GUARD:-540}))
  left() { local l=$((deadline - SECONDS)); echo $((l > 1 ? l : 1)); }  # timeout 0: none
  log=$results/gpu-session.log
  mkdir -p "$runs"
  # whatever happens, no run outlives the stage and the logs come back; a failure shows
  # their ends here too
  trap 'status=$?; jobs -p | xargs -r kill 2>/dev/null || true
    cat "$runs"/*.log >"$log" 2>/dev/null || true; bring_back "$log"
    if [ "$status" != 0 ]; then tail -n 40 "$log" >&2; fi' EXIT
  shrink=() record_extra=()  # TOY=1: the recipe at a size a CPU trains in seconds
  if [ "$toy" = 1 ]; then
    shrink=(--set preset=tiny --set token_budget=1000 --set max_steps=10 --set save_every=2
      --set device=cpu)
    record_extra=(--max-sentences 20)
  fi
  decoding=$("$py" benchmarks/recipe.py "$recipe" en-de --decoding)
  # an untrained toy model writes to the length limit: greedy, not a beam, keeps it short
  if [ "$toy" = 1 ]; then decoding="$decoding --beam-size 1"; fi
  for d in en-de de-en; do  # both at once, each train then record, in the background
    train_flags=$("$py" benchmarks/recipe.py "$recipe" "$d" "${shrink[@]}")
    rm -rf "${runs:?}/$d"
    # shellcheck disable=SC2086  # the flags are words to split
    (timeout "$(left)" "$py" -m transformer train $train_flags --out "$runs/$d" &&
      timeout "$(left)" "$py" -m transformer record "$runs/$d" --out "$results/$d.json" \
        $decoding "${record_extra[@]}") >"$runs/$d.log" 2>&1 &
  done
  for _ in 1 2; do wait -n; done  # the stage ends at the first that failed
  before=$(mktemp -d)
  cp "$weights"/* "$before"/
  for d in en-de de-en; do  # one at a time: each rewrites the manifest
    # shellcheck disable=SC2086
    timeout "$(left)" "$py" -m transformer ship "$runs/$d" --out "$weights" $decoding \
      >>"$runs/$d.log" 2>&1
  done
  changed=()  # the manifest, the GPU weights, and any file that ship wrote anew
  for f in "$weights"/*; do
    was=$before/$(basename "$f")  # (sha256sum: coreutils, on every machine)
    if [ ! -f "$was" ] || [ "$(sha256sum <"$f")" != "$(sha256sum <"$was")" ]; then
      changed+=("$f")
    fi
  done
  bring_back "$results/en-de.json" "$results/de-en.json" "${changed[@]}"
  # the benchmarks, as far as the guard allows: on a GPU, one that fails or runs out of time
  # costs nothing above; at toy size it must not fail
  if [ "$toy" = 1 ]; then
    bash benchmarks/gpu_session.sh bench >"$runs/bench.log" 2>&1
  elif [ "$(left)" -gt 60 ]; then
    timeout "$(left)" bash benchmarks/gpu_session.sh bench >"$runs/bench.log" 2>&1 ||
      echo "bench stopped or failed: see the log"
    bring_back "$results/benchmarks.json"  # what the benchmarks that ended wrote
  fi
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
  echo "unknown stage $stage: pack, all, search or bench" >&2
  exit 2
  ;;
esac
