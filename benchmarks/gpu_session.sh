#!/usr/bin/env bash
# Appendix 17's GPU work, each stage one device command of under 10 minutes. Run from the
# repository root of the GPU machine, where python3 has torch, sentencepiece, sacrebleu and tqdm.
# What it lacks travels in the ignored folder .gpu/, made here by `pack`: the corpus,
# platformdirs, the trained tokenizers, and the commit of this tree (there is no git there).
#
#   bash benchmarks/gpu_session.sh pack           # here, once: fill .gpu/ to carry
#   bash benchmarks/gpu_session.sh all [RECIPE]   # the session in one call, ended by GUARD
#       (540) seconds, with the recipe benchmarks/grids/gpu.json:
#       1. probe: the recipe's shape through benchmarks/train_loop.py for PROBE_SECONDS (15)
#          each, eager, compiled and compiled with CUDA graphs, alone; then the fastest twice
#          at once; all within PROBE_GUARD (150) s, each entry (or failure) in benchmarks.json,
#          with a profile of 20 steps (kernels a step, how busy the GPU was, the top ops)
#       2. train en-de and de-en with the fastest option, at once or one after the other, as
#          benchmarks/gpu_plan.py chooses from the probe
#       3. the decoding of each: the best on val of the recipe's choices -> trials.jsonl
#       4. record -> results/{en-de,de-en}.json; ship -> src/transformer/weights/
#       5. bench, smallest first; then trials of TRIALS (grids/gpu-trials.json) on val
#       At most 8 files come back: the 2 records, the manifest, the 2 weights,
#       benchmarks.json, trials.jsonl and one log, results/gpu-session.log.
#       PROBE_FAIL="compiled graphs" forces those options' probes to fail (a test).
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
  logs=$runs/logs  # numbered in the order they are written, and read back in it
  rm -rf "$logs" && mkdir -p "$logs"
  say() { echo "[$SECONDS s] $*" | tee -a "$logs/0-session.log"; }
  plan() { "$py" benchmarks/gpu_plan.py "$@" 2>>"$logs/0-session.log"; }  # its reasons: the log
  # whatever happens, no run outlives the stage and the logs come back as one; a failure
  # shows their ends here too
  trap 'status=$?; jobs -p | xargs -r kill 2>/dev/null || true
    cat "$logs"/*.log >"$results/gpu-session.log" 2>/dev/null || true
    bring_back "$results/gpu-session.log"
    if [ "$status" != 0 ]; then tail -n 40 "$results/gpu-session.log" >&2; fi' EXIT
  device=cuda probe_seconds=${PROBE_SECONDS:-15} probe_profile=20
  trials_grid=${TRIALS:-benchmarks/grids/gpu-trials.json}
  shrink=() record_extra=()  # TOY=1: the recipe at a size a CPU trains in seconds
  if [ "$toy" = 1 ]; then
    device=cpu probe_seconds=1 probe_profile=2 trials_grid=benchmarks/grids/toy.json
    shrink=(--set preset=tiny --set token_budget=1000 --set max_steps=10 --set save_every=2
      --set device=cpu)
    record_extra=(--max-sentences 20)
  fi

  # 1. the probe: the recipe's shape with each loop option, alone, then the fastest twice at
  # once; an option that fails or is skipped is recorded so, and the session goes on
  probe=$runs/probe.json probe_until=$((SECONDS + ${PROBE_GUARD:-150}))
  rm -f "$probe"
  read -r -a shape <<<"$("$py" benchmarks/recipe.py "$recipe" en-de --shape "${shrink[@]}")"
  failed() {  # OPTION PROCESSES REASON
    plan failed "$results/benchmarks.json" "$probe" --option "$1" --at-once "$2" --reason "$3" \
      --device "$device"
  }
  probe_option() {  # OPTION PROCESSES
    local option=$1 n=$2 flags pids=() i status budget=$((probe_until - SECONDS))
    read -r -a flags <<<"$(plan flags "$option")"
    if [[ " ${PROBE_FAIL:-} " == *" $option "* ]]; then  # forced to fail, to test the fallback
      flags+=(--set probe_forced_to_fail=1)
    fi
    if [ "$budget" -lt 10 ]; then failed "$option" "$n" "not run: the probe's time was spent"; return; fi
    say "probe: $option, $n at once, ${probe_seconds} s timed"
    for i in $(seq "$n"); do  # each ended by the probe's guard
      timeout "$budget" "$py" benchmarks/train_loop.py "${shape[@]}" "${flags[@]}" \
        --device "$device" --no-bare --seconds "$probe_seconds" --profile "$probe_profile" \
        --at-once "$n" --process "$i" \
        --json "$results/benchmarks.json" --json "$probe" >"$logs/1-probe-$option-$n-$i.log" 2>&1 &
      pids+=($!)
    done
    for i in "${!pids[@]}"; do
      wait "${pids[$i]}" && continue
      status=$?
      if [ "$status" = 124 ]; then
        failed "$option" "$n" "stopped by the probe's guard after $budget s"
      else
        failed "$option" "$n" "exit $status: $(tail -n 1 "$logs/1-probe-$option-$n-$((i + 1)).log")"
      fi
      wait  # the other process of a pair, if any
      return
    done
  }
  probe_option eager 1
  probe_option compiled 1
  if [ "$device" = cuda ] && "$py" -c "import torch, sys; sys.exit(not torch.cuda.is_available())"; then
    probe_option graphs 1
  else
    failed graphs 1 "skipped: CUDA graphs replay needs a CUDA device; this run is on the CPU"
  fi
  option=$(plan option "$probe")
  probe_option "$option" 2

  # 2. train both directions with the fastest option: at once, or one after the other with
  # the whole device, whichever gives each direction more steps and fits in the guard
  read -r -a settings <<<"$(plan settings "$option")"
  read -r -a flags <<<"$("$py" benchmarks/recipe.py "$recipe" en-de "${shrink[@]}" "${settings[@]}")"
  train_seconds=$(printf '%s\n' "${flags[@]}" | grep -A1 -x -- --max-seconds | tail -n 1)
  # max_seconds counts from each process's start, so a run takes it and a little more (the
  # first call's: 110.9 s for 110); kept for after training: choosing the decodings on val
  # (60 s), recording and shipping (30 s) and the bench's first entries (30 s)
  schedule=$(plan schedule "$probe" "$option" --train-seconds "$train_seconds" \
    --overhead-seconds "${OVERHEAD:-5}" --seconds-left $(($(left) - 120)))
  say "train with $option, $schedule"
  train() {  # DIRECTION
    local flags
    flags=$("$py" benchmarks/recipe.py "$recipe" "$1" "${shrink[@]}" "${settings[@]}")
    rm -rf "${runs:?}/$1"
    # shellcheck disable=SC2086  # the flags are words to split
    timeout "$(left)" "$py" -m transformer train $flags --out "$runs/$1" >"$logs/2-train-$1.log" 2>&1
  }
  if [ "$schedule" = at-once ]; then
    train en-de &
    train de-en &
    for _ in 1 2; do wait -n; done  # the stage ends at the first that failed
  else
    train en-de
    train de-en
  fi

  # 3. the decoding of each direction: the best on val of the recipe's choices
  read -r -a choices <<<"$("$py" benchmarks/recipe.py "$recipe" en-de --choices)"
  # an untrained toy model writes to the length limit: greedy, not a beam, keeps it short
  if [ "$toy" = 1 ]; then choices+=(--beam-size 1 "${record_extra[@]}"); fi
  declare -A decoding
  choose_for=$(($(left) - 90))  # what recording and shipping need is kept for them
  if [ "$choose_for" -gt 20 ] && timeout "$choose_for" "$py" benchmarks/choose_decoding.py \
    "$runs/en-de" "$runs/de-en" "${choices[@]}" --device "$device" \
    --out "$runs/decodings.jsonl" >"$logs/3-decoding.log" 2>&1; then
    cat "$runs/decodings.jsonl" >>"$results/trials.jsonl"
    for d in en-de de-en; do decoding[$d]=$(plan decoding "$runs/decodings.jsonl" "$runs/$d"); done
  else
    say "choosing the decoding failed or ran out of time: the recipe's first setting"
    for d in en-de de-en; do decoding[$d]=$("$py" benchmarks/recipe.py "$recipe" "$d" --decoding); done
  fi
  say "decodings: en-de ${decoding[en-de]}, de-en ${decoding[de-en]}"

  # 4. record and ship both, as the first run did; each record comes back as soon as it is
  # written, whatever happens after
  status=0
  for d in en-de de-en; do
    rm -f "$results/$d.json"  # so that only a new one comes back
    # shellcheck disable=SC2086
    timeout "$(left)" "$py" -m transformer record "$runs/$d" --out "$results/$d.json" \
      ${decoding[$d]} "${record_extra[@]}" >"$logs/4-record-$d.log" 2>&1 &
  done
  for _ in 1 2; do wait -n || status=$?; done
  for d in en-de de-en; do
    if [ -f "$results/$d.json" ]; then bring_back "$results/$d.json"; fi
  done
  if [ "$status" != 0 ]; then say "a record failed: see its log"; exit "$status"; fi
  before=$(mktemp -d)
  cp "$weights"/* "$before"/
  for d in en-de de-en; do  # one at a time: each rewrites the manifest
    # shellcheck disable=SC2086
    timeout "$(left)" "$py" -m transformer ship "$runs/$d" --out "$weights" ${decoding[$d]} \
      >>"$logs/4-record-$d.log" 2>&1
  done
  changed=()  # the manifest, the GPU weights, and any file that ship wrote anew
  for f in "$weights"/*; do
    was=$before/$(basename "$f")  # (sha256sum: coreutils, on every machine)
    if [ ! -f "$was" ] || [ "$(sha256sum <"$f")" != "$(sha256sum <"$was")" ]; then
      changed+=("$f")
    fi
  done
  if [ "${#changed[@]}" -gt 0 ]; then bring_back "${changed[@]}"; fi
  say "recorded and shipped: ${#changed[@]} files of the weights folder changed"

  # 5. the benchmarks, smallest first, as far as the guard allows; then recipe trials on val
  # with what is left. On a GPU one that fails or runs out of time costs nothing above; at
  # toy size none may fail
  if [ "$toy" = 1 ]; then
    bash benchmarks/gpu_session.sh bench >"$logs/5-bench.log" 2>&1
    bash benchmarks/gpu_session.sh search "$trials_grid" >"$logs/6-trials.log" 2>&1
  else
    if [ "$(left)" -gt 30 ]; then
      timeout "$(left)" bash benchmarks/gpu_session.sh bench >"$logs/5-bench.log" 2>&1 ||
        say "bench stopped or failed: see its log"
    fi
    if [ "$(left)" -gt 150 ]; then
      timeout "$(left)" bash benchmarks/gpu_session.sh search "$trials_grid" $(($(left) - 20)) \
        >"$logs/6-trials.log" 2>&1 || say "trials stopped or failed: see their log"
    fi
  fi
  bring_back "$results/benchmarks.json"
  if [ -f "$results/trials.jsonl" ]; then bring_back "$results/trials.jsonl"; fi
  say "done, $(left) s of the guard left"
  ;;
bench)
  # smallest first, so that something of each lands before a guard ends the stage: the
  # attention kernels, the paper's base step against nn.Transformer's (eager and compiled),
  # then the base model through the loop, compiled, and with CUDA graphs (the probe timed
  # the recipe's shape already)
  device=cuda steps=200 warmup=20 compile=--compile preset=base small=small
  loop_options=("--compile" "--compile --cuda-graphs")
  extra=()
  if [ "$toy" = 1 ]; then  # the same scripts and flags, at a size a CPU runs in a minute
    device=cpu steps=5 warmup=2 compile="" preset=tiny small=tiny loop_options=("")
    extra=(--batches 1 --repeats 1)
  fi
  "$py" benchmarks/attention_kernels.py --device "$device" --preset "$small"
  # shellcheck disable=SC2086  # $compile is a flag or nothing
  "$py" benchmarks/train_step.py --preset "$preset" --device "$device" --amp $compile \
    "${extra[@]}" --json "$results/benchmarks.json"
  bring_back "$results/benchmarks.json"
  for options in "${loop_options[@]}"; do
    # shellcheck disable=SC2086  # the options are words to split
    "$py" benchmarks/train_loop.py --preset "$preset" --device "$device" --steps "$steps" \
      --warmup "$warmup" $options --json "$results/benchmarks.json"
    bring_back "$results/benchmarks.json"
  done
  ;;
*)
  echo "unknown stage $stage: pack, all, search or bench" >&2
  exit 2
  ;;
esac
