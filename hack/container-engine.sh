#!/usr/bin/env bash
# hack/container-engine.sh: make sure a working container engine answers, for the kind cluster of
# `make e2e PROVIDER=kind` (docs/kubernetes.md, "A container engine in CI"). Idempotent: run it
# as often as you like; it changes nothing on a machine whose engine already works.
#
#  1. An engine that answers (`docker info`, else `podman info`, else `nerdctl info`) and can run a
#     privileged container is used as it is: the script prints its name and exits 0.
#  2. Otherwise, as root on Debian/Ubuntu: Debian's docker.io is installed with apt when dockerd is
#     missing, a stale dockerd (pid file without a process, socket without a daemon) is cleaned up,
#     and dockerd is started in the background (log: /var/log/eppkit-dockerd.log).
#  3. When the machine's capability bounding set lacks a capability that `docker run --privileged`
#     asks for (every capability up to /proc/sys/kernel/cap_last_cap), runc refuses privileged
#     containers and `docker exec --privileged` ("unable to apply caps: operation not permitted").
#     Only then, hack/runc-capdrop is built and set as dockerd's default runtime: it drops the
#     missing capabilities from each container's spec before calling runc.
#  4. A privileged smoke test (docker run + docker exec --privileged of a one-file image) proves it.
#
# Exit 0 with the engine's name on stdout's last line; exit 1 with what was tried and the fix.
#   hack/container-engine.sh --check   step 1 only: changes nothing (make e2e PROVIDER=kind)
# Environment: EPPKIT_ENGINE_LOG (dockerd log), EPPKIT_ENGINE_NO_INSTALL=1 (never apt-get install).
set -uo pipefail
cd "$(dirname "$0")/.."

LOG=${EPPKIT_ENGINE_LOG:-/var/log/eppkit-dockerd.log}
WRAPPER=/usr/local/libexec/eppkit/runc-capdrop
RUNTIME=eppkit-capdrop
DAEMON_JSON=/etc/docker/daemon.json
CHECK_IMAGE=eppkit-engine-check:local
tried=()

say() { echo "container-engine: $*" >&2; }
die() {
	say "ERROR: no working container engine."
	for t in "${tried[@]}"; do say "  tried: $t"; done
	say "  fix: $1"
	exit 1
}

answers() { timeout 20 "$1" info >/dev/null 2>&1; }

# missing_caps prints the capabilities 0..cap_last_cap that the bounding set lacks (none: empty).
missing_caps() {
	local bnd last i out=()
	bnd=$(awk '/^CapBnd:/ {print $2}' /proc/self/status)
	last=$(cat /proc/sys/kernel/cap_last_cap 2>/dev/null || echo 40)
	[ -n "$bnd" ] || return 0
	for ((i = 0; i <= last && i < 63; i++)); do
		if (((16#$bnd >> i) & 1)); then :; else out+=("$i"); fi
	done
	echo "${out[@]:-}"
}

# smoke ENGINE: a privileged run and a privileged exec of a one-file image (the static wrapper
# binary, or any static Go binary built here), which is what kind does with its node containers.
smoke() {
	local engine=$1 dir name=eppkit-engine-check-$$ out
	if ! "$engine" image inspect "$CHECK_IMAGE" >/dev/null 2>&1; then
		dir=$(mktemp -d)
		CGO_ENABLED=0 go build -o "$dir/check" ./hack/runc-capdrop || { rm -rf "$dir"; return 1; }
		tar -C "$dir" -cf "$dir/rootfs.tar" check
		"$engine" import --change 'ENTRYPOINT ["/check"]' "$dir/rootfs.tar" "$CHECK_IMAGE" >/dev/null || { rm -rf "$dir"; return 1; }
		rm -rf "$dir"
	fi
	"$engine" rm -f "$name" >/dev/null 2>&1
	if ! out=$("$engine" run -d --privileged --name "$name" --entrypoint /check "$CHECK_IMAGE" --sleep 2>&1); then
		echo "$engine run --privileged: $out"
		return 1
	fi
	if ! out=$("$engine" exec --privileged "$name" /check --check 2>&1); then
		"$engine" rm -f "$name" >/dev/null 2>&1
		echo "$engine exec --privileged: $out"
		return 1
	fi
	"$engine" rm -f "$name" >/dev/null 2>&1
	return 0
}

# 1. An engine that already works.
for e in docker podman nerdctl; do
	command -v "$e" >/dev/null || { tried+=("$e: not installed"); continue; }
	if answers "$e"; then
		if msg=$(smoke "$e"); then
			say "$e answers and runs privileged containers"
			echo "$e"
			exit 0
		fi
		tried+=("$e: answers, but a privileged container fails: $msg")
		[ "$e" = docker ] && break # dockerd may only need the runtime wrapper: step 3
	else
		tried+=("$e: installed, \`$e info\` does not answer")
	fi
done

if [ "${1:-}" = --check ]; then
	die "run hack/container-engine.sh as root (it installs Debian's docker.io, starts dockerd and adapts it to this host), or start Docker, Podman or nerdctl yourself; docs/kubernetes.md"
fi
[ "$(id -u)" = 0 ] || die "run this script as root (it installs docker.io and starts dockerd), or start Docker, Podman or nerdctl yourself"

# 2. Debian's docker.io and a running dockerd.
if ! command -v dockerd >/dev/null; then
	if [ -n "${EPPKIT_ENGINE_NO_INSTALL:-}" ] || ! command -v apt-get >/dev/null; then
		tried+=("dockerd: not installed, and apt-get is unavailable or EPPKIT_ENGINE_NO_INSTALL is set")
		die "install Docker (Debian/Ubuntu: apt-get install docker.io) or Podman"
	fi
	say "installing Debian's docker.io"
	if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io jq >/dev/null; }; then
		tried+=("apt-get install docker.io: failed")
		die "check apt's sources and network (apt-get update), then apt-get install docker.io"
	fi
fi

dockerd_pid() {
	local p
	p=$(cat /var/run/docker.pid 2>/dev/null) || return 1
	[ -n "$p" ] && kill -0 "$p" 2>/dev/null && echo "$p"
}

# 3. The runtime wrapper, only when the bounding set lacks a capability privileged asks for.
missing=$(missing_caps)
want_runtime=""
if [ -n "$missing" ]; then
	want_runtime=$RUNTIME
	say "the capability bounding set lacks capability number(s) $missing, which docker run --privileged asks for: installing $WRAPPER as dockerd's default runtime"
	mkdir -p "$(dirname "$WRAPPER")"
	if ! CGO_ENABLED=0 go build -o "$WRAPPER.tmp" ./hack/runc-capdrop; then
		tried+=("go build ./hack/runc-capdrop: failed")
		die "build the runtime wrapper by hand (go build -o $WRAPPER ./hack/runc-capdrop) and rerun"
	fi
	mv "$WRAPPER.tmp" "$WRAPPER"
	say "runc-capdrop will drop: $("$WRAPPER" --check)"
fi

configured_runtime() { jq -r '."default-runtime" // ""' "$DAEMON_JSON" 2>/dev/null; }
restart=no
if [ -n "$want_runtime" ] && [ "$(configured_runtime)" != "$want_runtime" ]; then
	command -v jq >/dev/null || apt-get install -y -qq jq >/dev/null
	mkdir -p "$(dirname "$DAEMON_JSON")"
	[ -s "$DAEMON_JSON" ] || echo '{}' >"$DAEMON_JSON"
	runc=$(command -v runc || echo /usr/sbin/runc)
	jq --arg rt "$want_runtime" --arg path "$WRAPPER" --arg runc "$runc" \
		'.runtimes[$rt] = {path: $path, runtimeArgs: ["--capdrop-runc=" + $runc]} | ."default-runtime" = $rt' \
		"$DAEMON_JSON" >"$DAEMON_JSON.tmp" && mv "$DAEMON_JSON.tmp" "$DAEMON_JSON"
	say "$DAEMON_JSON: default-runtime $want_runtime"
	restart=yes
fi

if pid=$(dockerd_pid); then
	if [ "$restart" = yes ] || ! answers docker; then
		say "stopping dockerd (pid $pid) to restart it with the new configuration"
		kill "$pid"
		for _ in $(seq 1 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
		kill -0 "$pid" 2>/dev/null && { tried+=("dockerd pid $pid: did not stop within 30 s"); die "stop dockerd by hand and rerun"; }
	fi
fi
if ! dockerd_pid >/dev/null; then
	# A stale pid file or socket of a dockerd that is gone keeps a new one from starting.
	rm -f /var/run/docker.pid /var/run/docker.sock
	say "starting dockerd (log: $LOG)"
	nohup dockerd >>"$LOG" 2>&1 </dev/null &
	for _ in $(seq 1 60); do answers docker && break; sleep 1; done
fi
if ! answers docker; then
	tried+=("dockerd started, but docker info does not answer after 60 s (log $LOG): $(tail -n 3 "$LOG" 2>/dev/null | tr '\n' ' ')")
	die "read $LOG; on cgroup or storage errors see docs/kubernetes.md"
fi

# 4. The privileged smoke test.
if ! msg=$(smoke docker); then
	tried+=("docker: privileged smoke test failed: $msg")
	die "read docs/kubernetes.md (\"A container engine in CI\"): privileged containers must work for kind"
fi
say "docker answers and runs privileged containers${want_runtime:+ (default runtime $want_runtime)}"
echo docker
