# shellcheck shell=bash disable=SC2153 # the *_PORT settings are defined in common.sh
# Apache Kafka 4.x, single node in KRaft mode (broker and controller in one JVM), run
# straight from the Maven Central jars collected by deploy/local/kafka/pom.xml.
#
# Layout: $LOCAL_DIR/kafka/{lib/ (jar cache, kept by `clean`), data/ (log.dirs),
#         tls/ (throwaway CA and server certificate), server.properties, cluster.id,
#         kafka.pid, kafka.log, port, sasl_port, tls_port}

KAFKA_ROOT=$LOCAL_DIR/kafka
KAFKA_LIB=$KAFKA_ROOT/lib
KAFKA_DATA=$KAFKA_ROOT/data
KAFKA_PIDFILE=$KAFKA_ROOT/kafka.pid
KAFKA_LOG=$KAFKA_ROOT/kafka.log
KAFKA_POM=$SCRIPT_DIR/kafka/pom.xml
KAFKA_LOG4J=$SCRIPT_DIR/kafka/log4j2.properties
KAFKA_TLS_DIR=$KAFKA_ROOT/tls
KAFKA_TLS_CA=$KAFKA_TLS_DIR/ca.pem
KAFKA_TLS_KEYSTORE=$KAFKA_TLS_DIR/server.pem
# Kafka reads a PEM key store file only together with ssl.key.password, and then wants the
# key as encrypted PKCS#8 in a PBES1 scheme: it looks up a SecretKeyFactory by the scheme's
# name, and Java 17 has none for PBES2 (what openssl uses by default). The password
# protects nothing (it sits in server.properties), so the old cipher does not matter.
KAFKA_TLS_KEY_PASSWORD=walhouse-local
# The broker shares 2 cores / 24 GiB with PostgreSQL, the ClickHouse engine and the tests:
# a fixed 1 GiB heap is plenty for a single test broker (page cache does the rest).
KAFKA_HEAP_OPTS=${KAFKA_HEAP_OPTS:--Xms1g -Xmx1g}

kafka_log() { printf '%s\n' "$KAFKA_LOG"; }

java_bin() {
	if [[ -n ${JAVA_HOME:-} ]]; then
		printf '%s\n' "$JAVA_HOME/bin/java"
	else
		printf '%s\n' java
	fi
}

kafka_need_java() {
	local java version
	java=$(java_bin)
	if ! command -v "$java" >/dev/null 2>&1; then
		apt_install openjdk-17-jre-headless
		java=$(java_bin)
	fi
	# "17.0.15", or "1.8.0_..." for the old scheme.
	version=$("$java" -XshowSettings:properties -version 2>&1 | sed -n 's/^ *java\.specification\.version = //p')
	[[ ${version%%.*} -ge 17 ]] 2>/dev/null || die "kafka: needs Java 17+, $java is ${version:-unknown} (set JAVA_HOME)"
}

# The lib dir is complete when its marker holds the sha256 of the pom that collected it.
kafka_lib_marker() { printf '%s\n' "$KAFKA_LIB/.walhouse-complete"; }

kafka_lib_complete() {
	local want
	want=$(sha256_of "$KAFKA_POM")
	[[ -r $(kafka_lib_marker) && $(<"$(kafka_lib_marker)") == "$want" ]]
}

kafka_install() {
	kafka_need_java
	kafka_lib_complete && return 0
	need_cmd mvn maven
	local tmp=$KAFKA_ROOT/lib.tmp
	log "kafka: collecting broker jars from Maven Central into $KAFKA_LIB ($(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$KAFKA_POM"))"
	rm -rf "$tmp"
	mkdir -p "$KAFKA_ROOT"
	# ~/.m2 is the cache: a rerun after `rm -rf .local` copies the jars without network.
	if ! mvn -B -q -Dstyle.color=never -f "$KAFKA_POM" dependency:copy-dependencies \
		-DincludeScope=runtime -DoutputDirectory="$tmp" </dev/null >"$KAFKA_ROOT/mvn.log" 2>&1; then
		show_log_tail "$KAFKA_ROOT/mvn.log"
		die "kafka: mvn dependency:copy-dependencies failed; read $KAFKA_ROOT/mvn.log"
	fi
	compgen -G "$tmp/kafka_2.13-*.jar" >/dev/null || die "kafka: no kafka_2.13 jar in $tmp after mvn"
	sha256_of "$KAFKA_POM" >"$tmp/.walhouse-complete"
	rm -rf "$KAFKA_LIB"
	mv "$tmp" "$KAFKA_LIB"
}

kafka_pid() {
	pidfile_pid "$KAFKA_PIDFILE" kafka.Kafka
}

kafka_port() {
	service_port kafka_pid "$KAFKA_ROOT" "$KAFKA_PORT"
}

# kafka_cli_argv CLASS: sets the array KAFKA_CLI to the java command running one of the
# Kafka CLI classes from the broker's jars (small heap, fast startup, warnings only, on stderr).
kafka_cli_argv() {
	KAFKA_CLI=("$(java_bin)" -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Xshare:auto
		-Djava.awt.headless=true
		-Dlog4j2.configurationFile="$KAFKA_LOG4J"
		-Dwalhouse.kafka.log.level=WARN -Dwalhouse.kafka.log.target=SYSTEM_ERR
		-cp "$KAFKA_LIB/*" "$1")
}

# kafka_java CLASS ARGS...: runs a Kafka CLI class.
kafka_java() {
	local -a KAFKA_CLI
	kafka_cli_argv "$1"
	shift
	"${KAFKA_CLI[@]}" "$@"
}

# kafka_cli CLASS ARGS...: runs a Kafka CLI class without stdin, bounded by a timeout.
kafka_cli() {
	local -a KAFKA_CLI
	kafka_cli_argv "$1"
	shift
	timeout 60 "${KAFKA_CLI[@]}" "$@" </dev/null
}

# kafka_tool NAME ARGS...: the Kafka CLI named as in the release's bin/kafka-NAME.sh
# (topics, console-producer, console-consumer, consumer-groups, broker-api-versions, ...),
# against our broker unless ARGS name another one. For tests and people.
kafka_tool() {
	local name=${1:?kafka tool name needed: topics, console-producer, console-consumer, consumer-groups, broker-api-versions, get-offsets, metadata-quorum}
	shift
	local class
	case $name in
	topics) class=org.apache.kafka.tools.TopicCommand ;;
	console-producer) class=org.apache.kafka.tools.ConsoleProducer ;;
	console-consumer) class=org.apache.kafka.tools.consumer.ConsoleConsumer ;;
	consumer-groups) class=org.apache.kafka.tools.consumer.group.ConsumerGroupCommand ;;
	broker-api-versions) class=org.apache.kafka.tools.BrokerApiVersionsCommand ;;
	get-offsets) class=org.apache.kafka.tools.GetOffsetShell ;;
	metadata-quorum) class=org.apache.kafka.tools.MetadataQuorumCommand ;;
	configs) class=kafka.admin.ConfigCommand ;;
	*.*) class=$name ;;
	*) die "unknown kafka tool '$name'" ;;
	esac
	kafka_lib_complete || die "kafka: jars not installed; run deploy/local/services.sh install kafka"
	if [[ " $* " != *" --bootstrap-server "* ]]; then
		set -- --bootstrap-server "127.0.0.1:$(kafka_port)" "$@"
	fi
	kafka_java "$class" "$@"
}

# kafka_tls_certs: makes, if missing, a throwaway CA (ca.pem, for clients) and the TLS
# listener's key store (server.pem: encrypted key, certificate for 127.0.0.1 and
# localhost, CA), kept across restarts so that a client's copy of ca.pem stays good.
# The CA's key is deleted once it has signed, so nothing else can ever carry that CA.
kafka_tls_certs() {
	[[ -s $KAFKA_TLS_CA && -s $KAFKA_TLS_KEYSTORE ]] && return 0
	local tmp=$KAFKA_TLS_DIR.tmp
	log "kafka: making a throwaway CA and server certificate in $KAFKA_TLS_DIR"
	make_test_certs kafka "$tmp"
	openssl pkcs8 -topk8 -v1 PBE-SHA1-3DES -passout "pass:$KAFKA_TLS_KEY_PASSWORD" \
		-in "$tmp/server.key" -out "$tmp/server.key.enc" 2>"$tmp/openssl.log" ||
		{ show_log_tail "$tmp/openssl.log"; die "kafka: encrypting the server key failed; read $tmp/openssl.log"; }
	cat "$tmp/server.key.enc" "$tmp/server.crt" "$tmp/ca.pem" >"$tmp/server.pem"
	rm -f "$tmp/server.key" "$tmp/server.key.enc" "$tmp/server.crt" "$tmp/client.key" "$tmp/client.crt" "$tmp/openssl.log"
	rm -rf "$KAFKA_TLS_DIR"
	mv "$tmp" "$KAFKA_TLS_DIR"
}

kafka_write_config() {
	cat >"$KAFKA_ROOT/server.properties" <<EOF
# Written by deploy/local/services.sh at each start; edits are lost.
# Single node, KRaft: this process is both the broker and the (only) controller.
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$KAFKA_CONTROLLER_PORT
controller.listener.names=CONTROLLER
listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT,SASL_PLAINTEXT://127.0.0.1:$KAFKA_SASL_PORT,SASL_SSL://127.0.0.1:$KAFKA_TLS_PORT,CONTROLLER://127.0.0.1:$KAFKA_CONTROLLER_PORT
advertised.listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT,SASL_PLAINTEXT://127.0.0.1:$KAFKA_SASL_PORT,SASL_SSL://127.0.0.1:$KAFKA_TLS_PORT
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL
# SASL/PLAIN on the second listener, for the tests of Kafka authentication.
sasl.enabled.mechanisms=PLAIN
listener.name.sasl_plaintext.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_walhouse="walhouse-local";
# The same over TLS on the third, as managed clusters do it, for the tests of Kafka over TLS.
listener.name.sasl_ssl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_walhouse="walhouse-local";
listener.name.sasl_ssl.ssl.keystore.type=PEM
listener.name.sasl_ssl.ssl.keystore.location=$KAFKA_TLS_KEYSTORE
listener.name.sasl_ssl.ssl.key.password=$KAFKA_TLS_KEY_PASSWORD
log.dirs=$KAFKA_DATA

# One replica of everything, internal topics included.
default.replication.factor=1
min.insync.replicas=1
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
# Fewer __consumer_offsets partitions than the default 50: the first consumer group
# is then ready sooner, which matters to tests that start from an empty broker.
offsets.topic.num.partitions=6

# walhouse creates its own topics.
auto.create.topics.enable=false
num.partitions=6
group.initial.rebalance.delay.ms=0
log.segment.bytes=1073741824
EOF
}

kafka_format() {
	local id
	# An id starting with '-' is taken for an option by StorageTool's parser
	# (and could never have formatted anything): make a new one.
	if [[ ! -s $KAFKA_ROOT/cluster.id || $(<"$KAFKA_ROOT/cluster.id") == -* ]]; then
		# A Kafka cluster id is a base64url-encoded (unpadded) random 16-byte
		# UUID; like Kafka's own Uuid.randomUuid, never one that starts with '-'.
		id=-
		while [[ $id == -* ]]; do
			id=$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=')
		done
		printf '%s\n' "$id" >"$KAFKA_ROOT/cluster.id"
	fi
	id=$(<"$KAFKA_ROOT/cluster.id")
	log "kafka: formatting $KAFKA_DATA (cluster id $id)"
	kafka_cli kafka.tools.StorageTool format -t "$id" -c "$KAFKA_ROOT/server.properties" \
		--ignore-formatted >>"$KAFKA_LOG" 2>&1 ||
		{ show_log_tail "$KAFKA_LOG"; die "kafka: storage format failed; read $KAFKA_LOG"; }
}

# kafka_ready: a real metadata round trip that lists our broker (node 1).
kafka_ready() {
	port_in_use "$(kafka_port)" || return 1
	kafka_cli org.apache.kafka.tools.BrokerApiVersionsCommand \
		--bootstrap-server "127.0.0.1:$(kafka_port)" 2>/dev/null | grep -q '(id: 1 '
}

kafka_start() {
	local pid spawned=0
	if pid=$(kafka_pid) && [[ ! -s $KAFKA_ROOT/sasl_port || ! -s $KAFKA_ROOT/tls_port ]]; then
		# Started by an older services.sh, without the listeners the tests need:
		# restart it with today's configuration (its data stays).
		log "kafka: running without the SASL or TLS listener; restarting it"
		kafka_stop
	fi
	if pid=$(kafka_pid); then
		log "kafka: already running (pid $pid, port $(kafka_port))"
	else
		kafka_install
		check_port_free kafka "$KAFKA_PORT"
		check_port_free "kafka controller" "$KAFKA_CONTROLLER_PORT"
		check_port_free "kafka sasl" "$KAFKA_SASL_PORT"
		check_port_free "kafka tls" "$KAFKA_TLS_PORT"
		mkdir -p "$KAFKA_DATA"
		kafka_tls_certs
		kafka_write_config
		[[ -f $KAFKA_DATA/meta.properties ]] || kafka_format
		printf '%s\n' "$KAFKA_PORT" >"$KAFKA_ROOT/port"
		printf '%s\n' "$KAFKA_SASL_PORT" >"$KAFKA_ROOT/sasl_port"
		printf '%s\n' "$KAFKA_TLS_PORT" >"$KAFKA_ROOT/tls_port"
		log "kafka: starting on 127.0.0.1:$KAFKA_PORT (controller $KAFKA_CONTROLLER_PORT)"
		spawned=1
		# shellcheck disable=SC2086 # KAFKA_HEAP_OPTS is a list of JVM flags
		spawn kafka "$KAFKA_PIDFILE" "$KAFKA_LOG" \
			"$(java_bin)" -server $KAFKA_HEAP_OPTS \
			-XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35 \
			-XX:+ExplicitGCInvokesConcurrent -Djava.awt.headless=true \
			-Dlog4j2.configurationFile="$KAFKA_LOG4J" \
			-cp "$KAFKA_LIB/*" kafka.Kafka "$KAFKA_ROOT/server.properties"
	fi
	wait_ready kafka "$KAFKA_LOG" kafka_pid kafka_ready || start_failed kafka kafka_stop "$spawned"
}

kafka_stop() {
	stop_service kafka kafka_pid "$KAFKA_PIDFILE"
}

kafka_clean() {
	rm -rf "$KAFKA_DATA" "$KAFKA_ROOT/lib.tmp" "$KAFKA_TLS_DIR" "$KAFKA_TLS_DIR.tmp"
	rm -f "$KAFKA_ROOT/cluster.id" "$KAFKA_ROOT/server.properties" "$KAFKA_PIDFILE" "$KAFKA_ROOT/sasl_port" \
		"$KAFKA_ROOT/tls_port" "$KAFKA_LOG" "$KAFKA_ROOT/port"
}
