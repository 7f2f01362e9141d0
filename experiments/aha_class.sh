#!/usr/bin/env bash
# The Aha lesson as a class (issue 45.3): a teacher (`sapo-edge host --preset aha`: its laptop
# sees the worked example) and three students, each its own process, home and network namespace
# on one bridge (a LAN with mDNS), one student a solo `--baseline`. The teacher's class view and
# one student's dashboard run in tmux; the other two students are headless (their logs). After
# MINUTES the teacher presses q (the class ends) and the report is in OUT/run/.
#   sudo experiments/aha_class.sh [OUT (/tmp/aha-class)] [MINUTES (20)]
# Pictures: OUT/shots/*.svg (tmux panes drawn by rich) and *.png (the page, by Chromium).
set -euo pipefail
OUT=${1:-/tmp/aha-class}
MINUTES=${2:-20}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=$ROOT/.venv/bin
NS=(aha0 aha1 aha2 aha3)
rm -rf "$OUT" && mkdir -p "$OUT/shots"

cleanup() {
    tmux kill-session -t aha 2>/dev/null || true
    for n in "${NS[@]}"; do ip netns pids "$n" 2>/dev/null | xargs -r kill 2>/dev/null || true; done
    sleep 1
    for n in "${NS[@]}"; do ip netns del "$n" 2>/dev/null || true; done
    ip link del br-aha 2>/dev/null || true
}
trap cleanup EXIT
cleanup
ip link add br-aha type bridge && ip link set br-aha up
for i in "${!NS[@]}"; do
    n=${NS[$i]}
    ip netns add "$n"
    ip link add "v$n" type veth peer name eth0 netns "$n"
    ip link set "v$n" master br-aha up
    ip -n "$n" addr add "10.89.0.$((i + 1))/24" dev eth0
    ip -n "$n" link set eth0 up
    ip -n "$n" link set lo up
done

run_in() {  # namespace, home, command...
    local n=$1 home=$2
    shift 2
    echo "ip netns exec $n env HF_HUB_OFFLINE=1 SAPO_EDGE_HOME=$home TERM=xterm-256color $*"
}

snap() {  # tmux window -> OUT/shots/NAME.svg (its colours kept)
    tmux capture-pane -e -p -t "aha:$1" > "$OUT/shots/$2.ansi"
    "$BIN/python" - "$OUT/shots/$2.ansi" "$OUT/shots/$2.svg" <<'EOF'
import sys
from rich.console import Console
from rich.text import Text
c = Console(record=True, width=160, file=open("/dev/null", "w"))
c.print(Text.from_ansi(open(sys.argv[1], encoding="utf-8").read()))
c.save_svg(sys.argv[2], title=sys.argv[2].rsplit("/", 1)[-1])
EOF
}

page() {  # the projector page, from the teacher's namespace
    ip netns exec aha0 timeout 60 chromium --headless --no-sandbox --disable-gpu --hide-scrollbars \
        --virtual-time-budget=8000 --window-size=1400,1300 --screenshot="$OUT/shots/$1.png" \
        http://127.0.0.1:7746/ \
        >/dev/null 2>&1 || true
}

at() { echo "$(date +%T) $*" | tee -a "$OUT/events.log"; }

tmux new-session -d -s aha -x 160 -y 50 -n host \
    "$(run_in aha0 "$OUT/h" "$BIN/sapo-edge" host --preset aha --out-dir "$OUT/run" --web 0.0.0.0:7746); sleep 600"
at "host started"
code=""
for _ in $(seq 120); do
    code=$(ip netns exec aha0 curl -s http://127.0.0.1:7746/class.json 2>/dev/null \
        | "$BIN/python" -c 'import json,sys; print(json.load(sys.stdin).get("code") or "")' 2>/dev/null || true)
    [ -n "$code" ] && break
    sleep 1
done
[ -n "$code" ] || { echo "no code from the host's page"; exit 1; }
at "code $code"
tmux new-window -d -t aha -n s1 \
    "$(run_in aha1 "$OUT/s1" "$BIN/sapo-edge" join "$code" --name ada --out-dir "$OUT/s1-run"); sleep 600"
ip netns exec aha2 env HF_HUB_OFFLINE=1 SAPO_EDGE_HOME="$OUT/s2" "$BIN/sapo-edge" join "$code" \
    --headless --name bob --out-dir "$OUT/s2-run" > "$OUT/s2.log" 2>&1 &
ip netns exec aha3 env HF_HUB_OFFLINE=1 SAPO_EDGE_HOME="$OUT/s3" "$BIN/sapo-edge" join "$code" \
    --headless --baseline --name solo --out-dir "$OUT/s3-run" > "$OUT/s3.log" 2>&1 &
at "three students joined (ada: dashboard, bob: headless, solo: headless --baseline)"

start=$(date +%s)
for shot in 1 2 4 8 12 16 20 25 30; do
    [ "$shot" -le "$MINUTES" ] || break
    while [ $(($(date +%s) - start)) -lt $((shot * 60)) ]; do sleep 5; done
    snap host "class-view-${shot}min"
    snap s1 "student-${shot}min"
    page "page-${shot}min"
    ip netns exec aha0 curl -s http://127.0.0.1:7746/class.json > "$OUT/shots/class-${shot}min.json" || true
    at "pictures at ${shot} min"
done
while [ $(($(date +%s) - start)) -lt $((MINUTES * 60)) ]; do sleep 5; done
tmux send-keys -t aha:host q
at "the teacher pressed q"
sleep 20
snap host class-view-end
snap s1 student-end
at "done"
cp "$OUT"/s2.log "$OUT"/s3.log "$OUT/shots/" 2>/dev/null || true
