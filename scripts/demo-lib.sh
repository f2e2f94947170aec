# shellcheck shell=bash
# Sourced by scripts/demo and scripts/demo-torchrun: how a demo shows what it does. Commands are
# echoed as they could be typed (+), commentary is dimmed (#), acts are bold.

# fd 3 is the terminal's stdout, so commands echoed inside $(...) are still shown.
exec 3>&1
if [ -t 1 ]; then BOLD=$'\e[1m' DIM=$'\e[2m' OFF=$'\e[0m'; else BOLD="" DIM="" OFF=""; fi

act() { printf '\n%s== %s ==%s\n' "$BOLD" "$*" "$OFF" >&3; }
say() { printf '%s# %s%s\n' "$DIM" "$*" "$OFF" >&3; }

# Prints a command as it could be typed: arguments with special characters in single quotes.
show() {
    local a words=()
    for a in "$@"; do
        if [[ $a =~ ^[A-Za-z0-9_./:=,@%+-]+$ ]]; then
            words+=("$a")
        else
            words+=("'${a//\'/\'\\\'\'}'")
        fi
    done
    printf '+ %s\n' "${words[*]}" >&3
}

run() {
    show "$@"
    "$@"
}

# capture VAR CMD...: runs CMD, shows its output, and keeps it in VAR.
capture() {
    local var="$1" out
    shift
    show "$@"
    out="$("$@")"
    printf '%s\n' "$out" >&3
    printf -v "$var" '%s' "$out"
}

# stop NAME PID: SIGTERM, and SIGKILL if it is still there 5 s later.
stop() {
    local name="$1" pid="$2" i
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 0
    echo "+ kill -TERM $pid   # $name" >&3
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 50; i++)); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.1
    done
    echo "$name (pid $pid) did not stop within 5 s; killing it" >&3
    kill -KILL "$pid" 2>/dev/null || true
}

