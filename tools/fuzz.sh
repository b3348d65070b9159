#!/usr/bin/env bash
# Runs the fuzz targets for longer than the test suite does (issue 22): rounds of random
# examples (a new seed each round) until a time budget runs out, per target file; stops at the
# first failure, which hypothesis prints with the input that reproduces it (keep it as an
# @example or a file under tests/data/fuzz/ once fixed).
#
#   tools/fuzz.sh [--minutes M] [--examples N] [TARGET...]
#
# TARGET is a file's suffix (sources, parameters, evaluate, folders, fetch) or a pytest -k
# expression after a colon (sources:quickdraw); no target: every file in tests/fuzz/.
# Defaults: 10 minutes per target, 2,000 examples per round. Run it from the project root in
# the environment of the README's test command.
set -euo pipefail
cd "$(dirname "$0")/.."
minutes=10
examples=2000
targets=()
while (($#)); do
    case "$1" in
        --minutes) minutes="$2"; shift 2 ;;
        --examples) examples="$2"; shift 2 ;;
        -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
        -*) echo "tools/fuzz.sh: unknown option $1 (--minutes M, --examples N)" >&2; exit 2 ;;
        *) targets+=("$1"); shift ;;
    esac
done
if ((${#targets[@]} == 0)); then
    for f in tests/fuzz/test_fuzz_*.py; do
        name="${f##*/test_fuzz_}"; targets+=("${name%.py}")
    done
fi
for target in "${targets[@]}"; do
    file="tests/fuzz/test_fuzz_${target%%:*}.py"
    if [[ ! -f "$file" ]]; then
        echo "tools/fuzz.sh: no target ${target%%:*} (no $file)" >&2; exit 2
    fi
    select=()
    [[ "$target" == *:* ]] && select=(-k "${target#*:}")
    deadline=$((SECONDS + minutes * 60))
    rounds=0
    start=$SECONDS
    while ((SECONDS < deadline)); do
        rounds=$((rounds + 1))
        PB_FUZZ_EXAMPLES="$examples" python -m pytest -q -x -p no:cacheprovider \
            "${select[@]}" "$file" >"/tmp/fuzz-${target//[:\/ ]/_}.log" 2>&1 || {
            echo "$target: FAILED in round $rounds (log: /tmp/fuzz-${target//[:\/ ]/_}.log)"
            tail -40 "/tmp/fuzz-${target//[:\/ ]/_}.log"
            exit 1
        }
    done
    echo "$target: $rounds rounds of $examples examples per test, $((SECONDS - start)) s, no failure"
done
