#!/usr/bin/env bash
# Capture, on a real GPU host, the exact commands of the facts the skills and doctor run, in
# the format tests/fixtures/captures.json indexes: a `$ command` line, the output, `# exit N`.
# Idle first, then with a PyTorch process holding memory and computing on GPU 0.
#   tests/gpu/capture_facts.sh OUT_DIR [PYTHON]
# (PYTHONPATH must let PYTHON import eaglebot: the commands are read from the facts themselves.)
set -uo pipefail
out=${1:?usage: capture_facts.sh OUT_DIR [PYTHON]}
py=${2:-python3}
mkdir -p "$out"
mapfile -t cmds < <("$py" - <<'EOF'
from eaglebot.facts.gpu import health, nvsmi
print(nvsmi.FUSER.command({}))
print(health.HEALTH.command({}))
print(nvsmi.GPU_NAMES.command({}))
print(nvsmi.COMPUTE_APPS.command({}))
EOF
)
names=(fuser health query-names compute-apps)

capture() {  # NAME-PREFIX STATE
  for i in "${!cmds[@]}"; do
    f="$out/h200-${names[$i]}-$2.txt"
    { echo "\$ ${cmds[$i]}"; bash -c "${cmds[$i]}"; echo "# exit $?"; } >"$f" 2>&1
  done
}

capture all idle
"$py" -c '
import time, torch
hold = torch.empty(6 << 30, dtype=torch.uint8, device="cuda")
a = torch.randn(8192, 8192, device="cuda")
end = time.time() + 20
while time.time() < end:
    a = (a @ a) / 8192.0
torch.cuda.synchronize()
' &
holder=$!
sleep 8
capture all busy
wait "$holder"
ls -l "$out"
