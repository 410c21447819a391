#!/usr/bin/env bash
# Is the judge's sandbox what makes launch-bound timings vary? Host cost per call in-process
# (bench/host_per_call.py), then one honest kernel judged five times, each in its own sandbox child,
# with every wall up, then each wall switched off in turn, then all off; prints the 1x1x1536 row.
#   bash bench/judge_timing_walls.sh      (CUDA GPU, the project's packages importable)
set -u
cd "$(dirname "$0")/.."
timeout 120 python3 bench/host_per_call.py 2>&1 | grep -v Warning | tail -8
for walls in "" "-audit" "-drop_root" "-netns" "-audit,-drop_root,-netns"; do
  out=/tmp/judge-walls/x$walls
  YANTRA_JUDGE_WALLS=$walls timeout 100 python3 bench/judge_corpus.py --only honest \
    --name template_rows1_warps4_bf16 --out "$out" >/dev/null 2>&1
  python3 - "$walls" "$out/judge_corpus_h200.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[2]))["results"]["template_rows1_warps4_bf16"]
row = r["timing"]["rows"][0]
print(repr(sys.argv[1]), r["reward"], {k: round(v, 1) for k, v in row.items() if k.endswith("_us")})
PY
done
