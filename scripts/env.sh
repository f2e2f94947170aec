# shellcheck shell=bash
# Sourced by scripts/setup, scripts/test and scripts/demo: paths, tools and small helpers.
# Safe under `set -euo pipefail`; it sets no shell options of its own.

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export ROOT

# The build directory lives outside the clone, so a fresh clone reuses a warm build.
DT_CACHE="${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/dynamic-training"
if [ -z "${CARGO_TARGET_DIR:-}" ]; then
    CARGO_TARGET_DIR="$DT_CACHE/target"
fi
export CARGO_TARGET_DIR
# The release build's tools (cargo-zigbuild, zig) live outside the clone too: the compiler
# wrappers they hand to every C build script name their path, and a path that changed with each
# clone would rebuild the whole release (16 minutes here) in every fresh clone.
export DT_RELEASE_TOOLS="${DT_RELEASE_TOOLS:-$DT_CACHE/release-tools}"
# PyTorch (requirements-torch.txt, about 5 GB) for the torchrun tests and demo act: outside the
# clone, so that a fresh clone does not download it again. The job it runs is never root's: run
# as root, the agents start it as another user (`job.launcher.user`), who cannot read root's
# home, so root's copy is in the system's cache directory instead.
if [ -z "${DT_TORCH_VENV:-}" ] && [ "$(id -u)" = 0 ]; then
    DT_TORCH_VENV=/var/cache/dynamic-training/torch
fi
export DT_TORCH_VENV="${DT_TORCH_VENV:-$DT_CACHE/torch}"

# The one build (scripts/build): release, linked by zig against the glibc of Amazon Linux 2023,
# for this machine's architecture. The demo runs these dtd and dtctl, the tests test them and
# scripts/release packs them, so the SDK is compiled once for all three.
export DT_GLIBC=2.34
DT_TRIPLE="$(uname -m)-unknown-linux-gnu"
export DT_TRIPLE
export DT_BIN_DIR="$CARGO_TARGET_DIR/$DT_TRIPLE/release"

# One run at a time per target directory. Every clone that shares it builds its dtd and dtctl to
# the same paths ($DT_BIN_DIR, cargo's CARGO_BIN_EXE_*), so another clone's build in the middle of
# a run would swap the binaries its demo or tests start. The lock is held by a `flock -o`
# process that runs the script: the script's children (moto, dtd) do not inherit it, so one
# left running can never keep it.
DT_TARGET_LOCK="$CARGO_TARGET_DIR/.dt-run.lock"

# dt_run_alone "$0" "$@": the first thing a script that builds or runs the binaries does. Re-runs
# the script under the lock, after saying whose run it waits for; a script started by one that
# holds it (scripts/build under scripts/test) goes straight on.
dt_run_alone() {
    if [ "${DT_TARGET_HELD:-}" = "$CARGO_TARGET_DIR" ]; then
        if [ -z "${DT_TARGET_HOLDER:-}" ]; then
            export DT_TARGET_HOLDER="$$"
            echo "$(basename "$1") in $ROOT (pid $$) since $(date -u +%H:%M:%SZ)" \
                >"$DT_TARGET_LOCK.holder"
        fi
        return 0
    fi
    dt_say_if_waiting "$(basename "$1")"
    export DT_TARGET_HELD="$CARGO_TARGET_DIR"
    exec flock -o "$DT_TARGET_LOCK" "$@"
}

dt_say_if_waiting() {
    mkdir -p "$CARGO_TARGET_DIR"
    if ! flock -n "$DT_TARGET_LOCK" true; then
        echo "$1: waiting for another run that uses $CARGO_TARGET_DIR (the last script to take it:" \
            "$(cat "$DT_TARGET_LOCK.holder" 2>/dev/null || echo none))" >&2
    fi
}

# dt_cargo SUBCOMMAND [--triple TRIPLE] ARGS...: cargo-zigbuild's SUBCOMMAND (zigbuild, test,
# clippy) on the one build's profile and target (TRIPLE defaults to this machine's). zig is
# found through CARGO_ZIGBUILD_PYTHON_PATH rather than PATH, so the tests it runs see the
# project's PATH (the release tools' virtualenv has a python3 of its own, without moto).
dt_cargo() {
    local sub="$1" triple="$DT_TRIPLE"
    shift
    if [ "${1:-}" = --triple ]; then
        triple="$2"
        shift 2
    fi
    # Typed in a shell: held for this one command (a script holds it already).
    local alone=()
    if [ "${DT_TARGET_HELD:-}" != "$CARGO_TARGET_DIR" ]; then
        dt_say_if_waiting dt_cargo
        alone=(flock -o "$DT_TARGET_LOCK")
    fi
    CARGO_ZIGBUILD_PYTHON_PATH="$DT_RELEASE_TOOLS/bin/python3" "${alone[@]}" \
        "$DT_RELEASE_TOOLS/bin/cargo-zigbuild" "$sub" --release --locked \
        --target "$triple.$DT_GLIBC" "$@"
}

# The project's Python tools (moto_server, aws, cfn-lint) come first.
export PATH="$ROOT/.venv/bin:$PATH"

# Read by the Rust integration tests, which start their own emulator.
export DT_MOTO_SERVER="$ROOT/.venv/bin/moto_server"
export DT_AWS_CLI="$ROOT/.venv/bin/aws"

# Prints a free TCP port on 127.0.0.1, outside the ephemeral range (why: scripts/free_port.py).
free_port() {
    python3 "$ROOT/scripts/free_port.py"
}

# start_moto PORT LOGFILE: starts moto_server on 127.0.0.1:PORT in the background, sets MOTO_PID,
# and returns once it answers HTTP (at most ~20 s). On failure prints why and the log's tail.
start_moto() {
    local port="$1" log="$2" i
    if [ ! -x "$DT_MOTO_SERVER" ]; then
        echo "error: $DT_MOTO_SERVER not found: run scripts/setup first" >&2
        return 1
    fi
    "$DT_MOTO_SERVER" -H 127.0.0.1 -p "$port" >"$log" 2>&1 &
    MOTO_PID=$!
    for ((i = 0; i < 100; i++)); do
        if python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=1)' \
            "http://127.0.0.1:$port/moto-api/" >/dev/null 2>&1; then
            return 0
        fi
        if ! kill -0 "$MOTO_PID" 2>/dev/null; then
            echo "error: moto_server exited while starting on 127.0.0.1:$port; end of $log:" >&2
            tail -n 20 "$log" >&2 || true
            return 1
        fi
        sleep 0.2
    done
    echo "error: moto_server (pid $MOTO_PID) did not answer on 127.0.0.1:$port within 20 s; end of $log:" >&2
    tail -n 20 "$log" >&2 || true
    return 1
}

# wait_for DESCRIPTION TIMEOUT_SECONDS CMD...: runs CMD every 0.2 s until it succeeds.
# CMD's output is hidden; on timeout, prints what was awaited and CMD's last output, returns 1.
wait_for() {
    local what="$1" timeout="$2" out="" start=$SECONDS
    shift 2
    while true; do
        if out="$("$@" 2>&1)"; then
            return 0
        fi
        if ((SECONDS - start >= timeout)); then
            echo "error: timed out after ${timeout}s waiting for $what" >&2
            echo "  last check: $*" >&2
            if [ -n "$out" ]; then
                printf '%s\n' "$out" | tail -n 10 | sed 's/^/  | /' >&2
            fi
            return 1
        fi
        sleep 0.2
    done
}
