#!/usr/bin/env bash
# cluster.sh starts and stops a throwaway three-master Redis Cluster on
# loopback for this module's cluster tests.
#
#   scripts/cluster.sh start [dir]   start it; print the addresses (last line)
#   scripts/cluster.sh stop  [dir]   stop the servers that start started
#   scripts/cluster.sh addrs [dir]   print the addresses again
#
# dir (default /tmp/hybridcache-cluster) holds the servers' pid files, logs,
# cluster config files and the file addrs. Nothing is persisted. The
# addresses are comma separated, ready for HYBRID_REDIS_CLUSTER:
#
#   export HYBRID_REDIS_CLUSTER=$(scripts/cluster.sh start | tail -n1)
#   go test -race -run Cluster ./l2/
#   scripts/cluster.sh stop
#
# stop kills only the processes named in dir's pid files, and only if they
# are still redis-server processes.
set -Eeuo pipefail

NODES=3

usage() {
	echo "usage: $0 start|stop|addrs [dir]" >&2
	exit 2
}

log() { echo "cluster.sh: $*" >&2; }

# in_use reports whether something accepts connections on 127.0.0.1:$1.
in_use() {
	(exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# alive reports whether pid $1 is a running redis-server.
alive() {
	local pid=$1
	[[ -n "$pid" && -r "/proc/$pid/cmdline" ]] || return 1
	tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q 'redis-server'
}

# start_node starts a cluster-enabled redis-server on a free port and prints
# the port.
start_node() {
	local dir=$1 attempt port
	for attempt in $(seq 1 20); do
		# The cluster bus listens on port+10000, so stay below 55536.
		port=$((20000 + RANDOM % 30000))
		if in_use "$port" || in_use $((port + 10000)); then
			continue
		fi
		redis-server \
			--port "$port" \
			--bind 127.0.0.1 \
			--protected-mode no \
			--cluster-enabled yes \
			--cluster-config-file "$dir/nodes-$port.conf" \
			--cluster-node-timeout 5000 \
			--save '' \
			--appendonly no \
			--dir "$dir" \
			--daemonize yes \
			--pidfile "$dir/redis-$port.pid" \
			--logfile "$dir/redis-$port.log" \
			--loglevel warning
		local i
		for i in $(seq 1 50); do
			if [[ "$(redis-cli -h 127.0.0.1 -p "$port" ping 2>/dev/null)" == PONG ]]; then
				echo "$port"
				return 0
			fi
			sleep 0.1
		done
		# Did not come up (lost a race for the port?): clean up, try another.
		log "redis-server on port $port did not answer; trying another port"
		stop_pidfile "$dir/redis-$port.pid"
		rm -f "$dir/nodes-$port.conf"
	done
	log "could not start a redis-server"
	return 1
}

# stop_pidfile kills the redis-server named in pid file $1 and waits for it.
stop_pidfile() {
	local file=$1 pid i
	[[ -f "$file" ]] || return 0
	pid=$(cat "$file")
	if alive "$pid"; then
		kill "$pid" 2>/dev/null || true
		for i in $(seq 1 50); do
			alive "$pid" || break
			sleep 0.1
		done
		if alive "$pid"; then
			kill -9 "$pid" 2>/dev/null || true
		fi
	fi
	rm -f "$file"
}

cmd_start() {
	local dir=$1
	command -v redis-server >/dev/null || { log "redis-server not on PATH"; exit 1; }
	command -v redis-cli >/dev/null || { log "redis-cli not on PATH"; exit 1; }
	mkdir -p "$dir"
	local f
	for f in "$dir"/redis-*.pid; do
		if [[ -f "$f" ]] && alive "$(cat "$f")"; then
			log "a cluster is already running from $dir (addresses: $(cat "$dir/addrs" 2>/dev/null)); run '$0 stop $dir' first"
			exit 1
		fi
	done
	rm -f "$dir"/redis-*.pid "$dir"/nodes-*.conf "$dir/addrs"

	trap 'log "start failed; stopping what was started"; cmd_stop "$dir" >/dev/null 2>&1 || true' ERR
	local ports=() addrs=() port
	for _ in $(seq 1 "$NODES"); do
		port=$(start_node "$dir")
		ports+=("$port")
		addrs+=("127.0.0.1:$port")
	done

	redis-cli --cluster create "${addrs[@]}" --cluster-replicas 0 --cluster-yes \
		>"$dir/create.log" 2>&1 || { log "redis-cli --cluster create failed:"; cat "$dir/create.log" >&2; false; }

	local ok i
	for i in $(seq 1 300); do
		ok=0
		for port in "${ports[@]}"; do
			if redis-cli -h 127.0.0.1 -p "$port" cluster info 2>/dev/null | grep -q '^cluster_state:ok'; then
				ok=$((ok + 1))
			fi
		done
		[[ $ok -eq ${#ports[@]} ]] && break
		sleep 0.1
	done
	if [[ $ok -ne ${#ports[@]} ]]; then
		log "cluster_state did not become ok on every node within 30s"
		false
	fi
	trap - ERR

	local joined
	joined=$(IFS=,; echo "${addrs[*]}")
	echo "$joined" >"$dir/addrs"
	log "cluster up in $dir: pids $(cat "$dir"/redis-*.pid | tr '\n' ' ')"
	echo "$joined"
}

cmd_stop() {
	local dir=$1 f n=0
	[[ -d "$dir" ]] || { log "no $dir"; return 0; }
	for f in "$dir"/redis-*.pid; do
		[[ -f "$f" ]] || continue
		stop_pidfile "$f"
		n=$((n + 1))
	done
	rm -f "$dir"/nodes-*.conf "$dir/addrs" "$dir/create.log" "$dir"/redis-*.log
	rmdir "$dir" 2>/dev/null || true
	log "stopped $n servers from $dir"
}

cmd_addrs() {
	local dir=$1
	[[ -f "$dir/addrs" ]] || { log "no cluster in $dir (run '$0 start $dir')"; exit 1; }
	cat "$dir/addrs"
}

[[ $# -ge 1 && $# -le 2 ]] || usage
dir=${2:-/tmp/hybridcache-cluster}
case $1 in
start) cmd_start "$dir" ;;
stop) cmd_stop "$dir" ;;
addrs) cmd_addrs "$dir" ;;
*) usage ;;
esac
