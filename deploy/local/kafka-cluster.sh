#!/usr/bin/env bash
# A local three-broker Kafka cluster (KRaft, each node broker and controller, a
# three-voter controller quorum) on loopback ports of its own, next to the single broker
# of services.sh, for the tests of walhouse on a replicated cluster (docs/scale-out.md,
# make chaos-cluster). Topics get replication factor 3 and min.insync.replicas=2 by
# default, unclean leader election is off. Its data is under .local/kafka-cluster/;
# it runs from the broker jars services.sh installs (.local/kafka/lib).
#
# usage: deploy/local/kafka-cluster.sh COMMAND [ARGS]
#   start          start the nodes that are not running, wait until all three are brokers
#                  of the cluster, write .local/kafka-cluster/env
#   stop [N...]    stop every node, or nodes N (1-3), gracefully (SIGTERM; data kept)
#   kill N...      kill -9 nodes N
#   start-node N   start node N again and wait until it is back in the cluster
#   status         one line per node; exit status 3 if any of them is not running
#   env            print .local/kafka-cluster/env (source it)
#   brokers        print the bootstrap list (127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3)
#   controller     print the node id of the active controller
#   leader T P     print the node id leading partition P of topic T
#   clean          stop and delete the cluster's data
#   kafka TOOL ... a Kafka CLI against the cluster (as services.sh kafka)
#
# Ports (env): KAFKA_CLUSTER_PORT=59192: node N's broker listens on KAFKA_CLUSTER_PORT+N-1
# (59192-59194), its controller on KAFKA_CLUSTER_PORT+N+2 (59195-59197).
# KAFKA_CLUSTER_HEAP_OPTS (default -Xms512m -Xmx512m per node).
# shellcheck source-path=SCRIPTDIR
set -euo pipefail

_here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
# shellcheck source=lib/common.sh
. "$_here/lib/common.sh"
# shellcheck source=lib/kafka.sh
. "$_here/lib/kafka.sh"

KC_NODES=(1 2 3)
KC_BASE=${KAFKA_CLUSTER_PORT:-59192}
KC_ROOT=$LOCAL_DIR/kafka-cluster
KC_ENV=$KC_ROOT/env
KC_HEAP_OPTS=${KAFKA_CLUSTER_HEAP_OPTS:--Xms512m -Xmx512m}

usage() {
	sed -n '2,/^[^#]/{/^#/!d;/shellcheck/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"
}

kc_port() { echo $((KC_BASE + $1 - 1)); }
kc_cport() { echo $((KC_BASE + $1 + 2)); }
kc_dir() { echo "$KC_ROOT/node$1"; }
kc_log() { echo "$(kc_dir "$1")/kafka.log"; }
kc_pidfile() { echo "$(kc_dir "$1")/kafka.pid"; }
kc_pid() { pidfile_pid "$(kc_pidfile "$1")" "$(kc_dir "$1")/server.properties"; }
# kc_cur_pid: kc_pid of node KC_CUR, for helpers that take a function without arguments.
KC_CUR=1
kc_cur_pid() { kc_pid "$KC_CUR"; }

kc_brokers() {
	local n out=()
	for n in "${KC_NODES[@]}"; do
		out+=("127.0.0.1:$(kc_port "$n")")
	done
	local IFS=,
	echo "${out[*]}"
}

kc_node_arg() {
	[[ $1 =~ ^[123]$ ]] || die "node '$1': want 1, 2 or 3"
}

kc_write_config() {
	local n=$1 voters="" m
	for m in "${KC_NODES[@]}"; do
		voters+="${voters:+,}$m@127.0.0.1:$(kc_cport "$m")"
	done
	mkdir -p "$(kc_dir "$n")/data"
	cat >"$(kc_dir "$n")/server.properties" <<EOF
# Written by deploy/local/kafka-cluster.sh at each start; edits are lost.
# Node $n of three; each is a broker and a voter of the controller quorum.
process.roles=broker,controller
node.id=$n
controller.quorum.voters=$voters
controller.listener.names=CONTROLLER
listeners=PLAINTEXT://127.0.0.1:$(kc_port "$n"),CONTROLLER://127.0.0.1:$(kc_cport "$n")
advertised.listeners=PLAINTEXT://127.0.0.1:$(kc_port "$n")
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=$(kc_dir "$n")/data

# What walhouse's guarantee needs of a cluster (docs/scale-out.md): three replicas, an
# acknowledged write on at least two of them, and no out-of-sync replica ever elected.
default.replication.factor=3
min.insync.replicas=2
unclean.leader.election.enable=false
offsets.topic.replication.factor=3
offsets.topic.num.partitions=6
transaction.state.log.replication.factor=3
transaction.state.log.min.isr=2
share.coordinator.state.topic.replication.factor=3
share.coordinator.state.topic.min.isr=2

auto.create.topics.enable=false
num.partitions=6
group.initial.rebalance.delay.ms=0
log.segment.bytes=268435456
EOF
}

kc_format() {
	local n=$1 id
	if [[ ! -s $KC_ROOT/cluster.id ]]; then
		id=-
		while [[ $id == -* ]]; do
			id=$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=')
		done
		printf '%s\n' "$id" >"$KC_ROOT/cluster.id"
	fi
	id=$(<"$KC_ROOT/cluster.id")
	kafka_cli kafka.tools.StorageTool format -t "$id" -c "$(kc_dir "$n")/server.properties" \
		--ignore-formatted >>"$(kc_log "$n")" 2>&1 ||
		{ show_log_tail "$(kc_log "$n")"; die "kafka-cluster: formatting node $n failed; read $(kc_log "$n")"; }
}

# kc_spawn N: starts node N unless it runs.
kc_spawn() {
	local n=$1 pid
	if pid=$(kc_pid "$n"); then
		log "kafka-cluster: node $n already running (pid $pid, port $(kc_port "$n"))"
		return 0
	fi
	check_port_free "kafka-cluster node $n" "$(kc_port "$n")"
	check_port_free "kafka-cluster controller $n" "$(kc_cport "$n")"
	kc_write_config "$n"
	[[ -f $(kc_dir "$n")/data/meta.properties ]] || kc_format "$n"
	log "kafka-cluster: starting node $n on 127.0.0.1:$(kc_port "$n") (controller $(kc_cport "$n"))"
	# shellcheck disable=SC2086 # KC_HEAP_OPTS is a list of JVM flags
	spawn "kafka-cluster node $n" "$(kc_pidfile "$n")" "$(kc_log "$n")" \
		"$(java_bin)" -server $KC_HEAP_OPTS \
		-XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35 \
		-XX:+ExplicitGCInvokesConcurrent -Djava.awt.headless=true \
		-Dlog4j2.configurationFile="$KAFKA_LOG4J" \
		-cp "$KAFKA_LIB/*" kafka.Kafka "$(kc_dir "$n")/server.properties"
}

# kc_ready N: node N answers a metadata request that lists every running node.
kc_ready() {
	local n=$1 out m
	port_in_use "$(kc_port "$n")" || return 1
	out=$(kafka_cli org.apache.kafka.tools.BrokerApiVersionsCommand \
		--bootstrap-server "127.0.0.1:$(kc_port "$n")" 2>/dev/null) || return 1
	for m in "${KC_NODES[@]}"; do
		if kc_pid "$m" >/dev/null; then
			grep -q "(id: $m " <<<"$out" || return 1
		fi
	done
}

kc_wait() {
	local n=$1
	KC_CUR=$n
	wait_ready "kafka-cluster node $n" "$(kc_log "$n")" kc_cur_pid kc_ready "$n" ||
		die "kafka-cluster: node $n did not join the cluster; read $(kc_log "$n")"
}

kc_reserve() {
	local n ports=()
	for n in "${KC_NODES[@]}"; do
		ports+=("$(kc_port "$n")" "$(kc_cport "$n")")
	done
	reserve_ports "${ports[@]}"
}

kc_write_env() {
	{
		echo "# Written by deploy/local/kafka-cluster.sh start. Use: . $KC_ENV"
		echo "export WALHOUSE_KAFKA_CLUSTER=$(kc_brokers)"
	} >"$KC_ENV.tmp"
	mv -f "$KC_ENV.tmp" "$KC_ENV"
}

cmd_start() {
	local n t0=$SECONDS
	kafka_lib_complete || kafka_install
	kc_reserve
	mkdir -p "$KC_ROOT"
	for n in "${KC_NODES[@]}"; do
		kc_spawn "$n"
	done
	for n in "${KC_NODES[@]}"; do
		kc_wait "$n"
	done
	kc_write_env
	log "kafka-cluster: ready on $(kc_brokers) ($((SECONDS - t0))s); environment in $KC_ENV"
}

cmd_start_node() {
	kc_node_arg "$1"
	kc_reserve
	kc_spawn "$1"
	kc_wait "$1"
}

cmd_stop() {
	local n pid pids=()
	if (($# == 0)); then
		# All at once: stopped one by one, the last node would wait for a
		# controller quorum that is gone before its controlled shutdown.
		for n in "${KC_NODES[@]}"; do
			if pid=$(kc_pid "$n"); then
				log "kafka-cluster node $n: stopping (pid $pid)"
				kill -TERM "$pid" 2>/dev/null || true
				pids+=("$n:$pid")
			fi
		done
		for pid in "${pids[@]}"; do
			n=${pid%%:*} pid=${pid#*:}
			if ! wait_exit "$pid" "$STOP_TIMEOUT"; then
				log "kafka-cluster node $n (pid $pid) still running after ${STOP_TIMEOUT}s: SIGKILL"
				kill -KILL "$pid" 2>/dev/null || true
				wait_exit "$pid" 10 || die "node $n (pid $pid) survived SIGKILL"
			fi
			rm -f "$(kc_pidfile "$n")"
		done
		return 0
	fi
	for n in "$@"; do
		kc_node_arg "$n"
		KC_CUR=$n
		stop_service "kafka-cluster node $n" kc_cur_pid "$(kc_pidfile "$n")"
	done
}

cmd_kill() {
	local n pid
	(($# > 0)) || die "kill: name the nodes (1-3)"
	for n in "$@"; do
		kc_node_arg "$n"
		if pid=$(kc_pid "$n"); then
			log "kafka-cluster: kill -9 node $n (pid $pid)"
			kill -KILL "$pid"
			wait_exit "$pid" 10 || die "node $n (pid $pid) survived SIGKILL"
			rm -f "$(kc_pidfile "$n")"
		fi
	done
}

cmd_status() {
	local n pid rc=0
	for n in "${KC_NODES[@]}"; do
		if pid=$(kc_pid "$n"); then
			printf 'node %s  running  port %s  controller %s  pid %s\n' "$n" "$(kc_port "$n")" "$(kc_cport "$n")" "$pid"
		else
			printf 'node %s  stopped  port %s  controller %s  pid -\n' "$n" "$(kc_port "$n")" "$(kc_cport "$n")"
			rc=3
		fi
	done
	return "$rc"
}

# kc_any_broker: the address of a running node.
kc_any_broker() {
	local n
	for n in "${KC_NODES[@]}"; do
		if kc_pid "$n" >/dev/null; then
			echo "127.0.0.1:$(kc_port "$n")"
			return 0
		fi
	done
	die "kafka-cluster: no node runs"
}

cmd_controller() {
	# --bootstrap-controller asks the quorum itself; LeaderId is the active controller.
	local n voters=""
	for n in "${KC_NODES[@]}"; do
		if kc_pid "$n" >/dev/null; then
			voters+="${voters:+,}127.0.0.1:$(kc_cport "$n")"
		fi
	done
	[[ -n $voters ]] || die "kafka-cluster: no node runs"
	kafka_cli org.apache.kafka.tools.MetadataQuorumCommand --bootstrap-controller "$voters" describe --status |
		sed -n 's/^LeaderId: *\([0-9]*\).*/\1/p'
}

cmd_leader() {
	local topic=${1:?leader: topic needed} partition=${2:?leader: partition needed}
	kafka_cli org.apache.kafka.tools.TopicCommand --bootstrap-server "$(kc_any_broker)" --describe --topic "$topic" |
		awk -v p="$partition" '$0 ~ "Partition: " p "\t" || $0 ~ "Partition: " p " " { for (i = 1; i <= NF; i++) if ($i == "Leader:") { print $(i + 1); exit } }'
}

cmd_clean() {
	cmd_stop
	rm -rf "$KC_ROOT"
}

main() {
	local cmd=${1:-}
	[[ $# -eq 0 ]] || shift
	case $cmd in
	start) cmd_start ;;
	start-node) cmd_start_node "${1:?start-node: which node (1-3)?}" ;;
	stop) cmd_stop "$@" ;;
	kill) cmd_kill "$@" ;;
	status) cmd_status ;;
	env) [[ -r $KC_ENV ]] || die "no $KC_ENV yet: run deploy/local/kafka-cluster.sh start"; cat "$KC_ENV" ;;
	brokers) kc_brokers ;;
	controller) cmd_controller ;;
	leader) cmd_leader "$@" ;;
	clean) cmd_clean ;;
	kafka)
		local name=${1:?kafka tool name needed}
		shift
		if [[ " $* " != *" --bootstrap-server "* ]]; then
			set -- --bootstrap-server "$(kc_brokers)" "$@"
		fi
		kafka_tool "$name" "$@"
		;;
	-h | --help | help) usage ;;
	"") usage >&2; exit 2 ;;
	*) log "unknown command '$cmd'"; usage >&2; exit 2 ;;
	esac
}

main "$@"
