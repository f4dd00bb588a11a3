#!/bin/bash
# The gate on a problem whose model.json records a compile setting (GPU): the model item's check.
set -u
P=/tmp/gate-compile; rm -rf $P; mkdir -p $P/problems $P/kernels/log_softmax_scale
cp tests/problems/log_softmax_scale.py $P/problems/
printf '[tool.kernelopt]\nproblems = ["problems/*.py"]\n' > $P/pyproject.toml
printf '{"schema_version": 1, "model": "log_softmax_scale", "compile": {"variant": "max-autotune", "measured": "2026-12-03T00:00:00Z", "seeds": []}}' > $P/kernels/log_softmax_scale/model.json
cd $P && timeout 200 python -m pytest -p pytest_kernelopt.plugin --kernelopt --kernelopt-seeds 2 -p no:cacheprovider -W ignore --kernelopt-json $OUT/gate.json -q 2>&1 | tail -8
python - <<'PY'
import json, os
for i in json.load(open(os.environ["OUT"] + "/gate.json"))["items"]:
    print(i["item"], i.get("kernel"), i["outcome"], i.get("status"), "compile", i.get("compile"), i.get("compile_speedup"),
          i.get("compile_speedup_ci"), "limit", i.get("limit_pct"), i.get("baseline_limit_pct"), (i.get("message") or "")[:300])
PY
