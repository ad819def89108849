#!/usr/bin/env bash
# The local stack: Apache Kafka's own broker (KRaft, from Maven Central), a real
# BigQuery emulator (bqemulator) and a real Cloud Storage emulator
# (gcp-storage-emulator), installed from the package registries into a cache outside
# the clone, and the project's own Confluent-compatible Schema Registry
# (scripts/schema_registry.py: none can be installed from the registries), all started
# on loopback ports. Beside them, stand-ins for what Google's templates authenticate
# with (stdlib Python, nothing installed): Secret Manager (scripts/secret_manager.py),
# an OAuth 2.0 token endpoint (scripts/token_endpoint.py), and the registry's
# mutual-TLS, OAuth-bearer and Google-token (ADC) listeners.
#
#   scripts/stack.sh install                 install everything (idempotent, pinned, cached)
#   scripts/stack.sh start [NAME]            install if needed, start, wait until ready
#   scripts/stack.sh stop  [NAME]            stop everything of NAME (its cluster too)
#   scripts/stack.sh status [NAME]           print pids and ports
#   scripts/stack.sh env   [NAME]            the environment variables that point flexrun at it
#   scripts/stack.sh cluster-start [NAME]    three more brokers, for the failover tests
#   scripts/stack.sh kill-node NAME ID       SIGKILL one of the cluster's nodes (1..3)
#   scripts/stack.sh start-node NAME ID      start it again on its data
#   scripts/stack.sh restart-kafka [NAME]    SIGKILL the single broker and start it again
#
# NAME (default "demo") selects a port set and a state folder, so the demo, the test
# suite and the benchmarks can run side by side. Ports can be overridden with
# FLEXRUN_KAFKA_PORT, FLEXRUN_BQ_REST_PORT and FLEXRUN_BQ_GRPC_PORT (and the others
# set_names reads).
#
# The single broker (one combined broker+controller node) listens on four ports from
# FLEXRUN_KAFKA_PORT (P): P PLAINTEXT, P+1 SASL_SSL (PLAIN, SCRAM-SHA-512 and
# OAUTHBEARER), P+2 SSL (TLS; a client certificate is asked for, not required), P+3 its
# controller. The TLS listeners advertise the name `localhost`, and the stack's test CA
# signs a certificate for that name only, so a client that checks host names must use
# it (docs/local-stack.md says why each setting is what it is).
set -euo pipefail

KAFKA_VERSION=4.1.1
BQEMULATOR_VERSION=1.4.0
DUCKDB_VERSION=1.5.5
GCS_EMULATOR_VERSION=2026.7.19
GCS_BUCKET=flexrun
BQ_PROJECT=${FLEXRUN_BQ_PROJECT:-flexrun-local}
# Test credentials of the local broker's SASL listener (PLAIN and SCRAM-SHA-512).
SASL_USER=flexrun
SASL_PASSWORD=flexrun-secret
TLS_PASSWORD=flexrun-test

CACHE=${FLEXRUN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/flexrun}
STACK=$CACHE/stack
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# The broker's jars, keyed by the pom's content: a changed pom resolves again.
KAFKA_KEY=$(sha256sum "$HERE/kafka/pom.xml" | cut -c1-12)
KAFKA_LIB=$STACK/kafka-$KAFKA_VERSION-$KAFKA_KEY/lib
VENV=$STACK/bqemulator-$BQEMULATOR_VERSION
GCS_VENV=$STACK/gcs-emulator-$GCS_EMULATOR_VERSION
TLS=$STACK/tls
# The broker's OAUTHBEARER check of Google's token shape, compiled from its source.
VALIDATOR_SRC=$HERE/kafka/validator/flexrun/GoogleTokenValidator.java
VALIDATOR=$STACK/validator-$(sha256sum "$VALIDATOR_SRC" | cut -c1-12)
# The prefix of the access tokens the test's token endpoint issues (see the validator).
GOOGLE_TOKEN_PREFIX=ya29.flexrun-local
# The OAuth client of the token endpoint (scripts/token_endpoint.py), for the registry's
# OAUTH mode, and the prefix of the client-credentials tokens it issues.
OAUTH_CLIENT_ID=flexrun-oauth-client
OAUTH_CLIENT_SECRET=flexrun-oauth-secret
OAUTH_TOKEN_PREFIX=oauth.flexrun-local
# The Java stores for the registry's TLS mode (made by install_registry_tls): three
# different passwords, as Google's template takes three secrets. A PKCS12 store has one
# password for the store and its key (keytool refuses another), so the key password
# applies to the JKS keystore only.
SR_TRUSTSTORE_PASSWORD=flexrun-truststore
SR_KEYSTORE_PASSWORD=flexrun-keystore
SR_KEY_PASSWORD=flexrun-key
# The base path of Google's managed registry, which the registry's ADC listener serves.
SR_GOOGLE_PATH=/v1/projects/$BQ_PROJECT/locations/us-central1/schemaRegistries/flexrun

log() { printf '[stack] %s\n' "$*" >&2; }

# kafka, bq REST, bq gRPC, bq faults, registry, gcs, secret manager, token endpoint,
# registry TLS, registry OAuth bearer, registry ADC. Kafka also takes P+1..P+3 and the
# cluster P+21..P+23 and P+31..P+33.
ports_for() {
  case "$1" in
    demo) echo "19092 19050 19060 19070 19081 19023 19031 19032 19082 19083 19084" ;;
    test) echo "29092 29050 29060 29070 29081 29023 29031 29032 29082 29083 29084" ;;
    bench) echo "39092 39050 39060 39070 39081 39023 39031 39032 39082 39083 39084" ;;
    lifecycle) echo "59092 59050 59060 59070 59081 59023 59031 59032 59082 59083 59084" ;;
    h65) echo "61092 61050 61060 61070 61081 61023 61031 61032 61082 61083 61084" ;;
    *) echo "49092 49050 49060 49070 49081 49023 49031 49032 49082 49083 49084" ;;
  esac
}

set_names() {
  NAME=${1:-demo}
  read -r dk dr dg df ds dc dm dt dx db da <<<"$(ports_for "$NAME")"
  KAFKA_PORT=${FLEXRUN_KAFKA_PORT:-$dk}
  BQ_REST_PORT=${FLEXRUN_BQ_REST_PORT:-$dr}
  BQ_GRPC_PORT=${FLEXRUN_BQ_GRPC_PORT:-$dg}
  # The launcher's loopback fault-injection port (tests only; see bqemulator_launcher.py).
  BQ_FAULT_PORT=${FLEXRUN_BQ_FAULT_PORT:-$df}
  # The Confluent-compatible Schema Registry (scripts/schema_registry.py, stdlib Python).
  REGISTRY_PORT=${FLEXRUN_SCHEMA_REGISTRY_PORT:-$ds}
  # The Cloud Storage emulator (gcp-storage-emulator from PyPI, scripts/gcs_emulator_launcher.py).
  GCS_PORT=${FLEXRUN_GCS_PORT:-$dc}
  # Google Secret Manager's stand-in and the OAuth token endpoint (stdlib Python).
  SECRETS_PORT=${FLEXRUN_SECRET_MANAGER_PORT:-$dm}
  TOKEN_PORT=${FLEXRUN_TOKEN_ENDPOINT_PORT:-$dt}
  # The registry's other listeners: mutual TLS, OAuth bearer tokens, Google tokens (ADC).
  REGISTRY_TLS_PORT=${FLEXRUN_SCHEMA_REGISTRY_TLS_PORT:-$dx}
  REGISTRY_BEARER_PORT=${FLEXRUN_SCHEMA_REGISTRY_BEARER_PORT:-$db}
  REGISTRY_ADC_PORT=${FLEXRUN_SCHEMA_REGISTRY_ADC_PORT:-$da}
  # The three-node cluster: node i's broker on CLUSTER_PORT+i, its controller on +10+i.
  CLUSTER_PORT=$((KAFKA_PORT + 20))
  RUN=$CACHE/run/$NAME
}

# Apache Kafka's server through Maven, into the stack's cache (~/.m2 keeps the jars too).
install_kafka() {
  if [ -f "$KAFKA_LIB/.flexrun-ready" ]; then
    return
  fi
  command -v java >/dev/null && command -v mvn >/dev/null || {
    log "Kafka's broker needs java (17+) and mvn: apt-get install openjdk-17-jre-headless maven"
    exit 1
  }
  log "resolving Apache Kafka $KAFKA_VERSION through Maven into $KAFKA_LIB"
  rm -rf "$KAFKA_LIB" && mkdir -p "$KAFKA_LIB"
  mvn -q -B -f "$HERE/kafka/pom.xml" dependency:copy-dependencies -DoutputDirectory="$KAFKA_LIB" \
    >"$STACK/kafka-install.log" 2>&1 || {
    tail -30 "$STACK/kafka-install.log" >&2
    log "resolving Kafka failed; full log in $STACK/kafka-install.log"
    exit 1
  }
  ls "$KAFKA_LIB"/kafka_2.13-"$KAFKA_VERSION".jar >/dev/null
  touch "$KAFKA_LIB/.flexrun-ready"
}

# The stack's test CA, and a certificate it signs for the broker (DNS:localhost only)
# and one for a client (mutual TLS), made once with openssl.
install_tls() {
  if [ -f "$TLS/.flexrun-ready" ]; then
    return
  fi
  log "making the stack's test CA and certificates in $TLS"
  rm -rf "$TLS" && mkdir -p "$TLS"
  (
    cd "$TLS"
    openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=flexrun test CA" \
      -keyout ca.key -out ca.pem 2>/dev/null
    for who in broker client; do
      openssl req -newkey rsa:2048 -nodes -subj "/CN=$who" -keyout "$who.key" -out "$who.csr" 2>/dev/null
      printf 'subjectAltName=DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n' >"$who.ext"
      openssl x509 -req -in "$who.csr" -CA ca.pem -CAkey ca.key -CAcreateserial -days 3650 \
        -extfile "$who.ext" -out "$who.pem" 2>/dev/null
    done
    openssl pkcs12 -export -in broker.pem -inkey broker.key -certfile ca.pem -name broker \
      -passout "pass:$TLS_PASSWORD" -out broker.p12
    # librdkafka's ssl.keystore: the client's certificate and key in one PEM file.
    cat client.pem client.key >client-bundle.pem
    # A CA nobody signed the broker with, for the test that a wrong CA is refused.
    openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=other CA" \
      -keyout other-ca.key -out other-ca.pem 2>/dev/null
  )
  touch "$TLS/.flexrun-ready"
}

# The registry's TLS material, signed by the stack's test CA (made once, beside the
# broker's): a server certificate for DNS:localhost only (as the broker's), a client
# certificate, a client certificate from the other CA (refused), and the Java stores
# Google's template takes: a JKS truststore and JKS and PKCS12 keystores holding the
# client's key, made with keytool (a PKCS12 truststore too). One CA signs the broker's
# and the registry's certificates, so the stores also work on the broker's SSL listener.
install_registry_tls() {
  if [ -f "$TLS/.registry-ready" ]; then
    return
  fi
  command -v keytool >/dev/null || {
    log "the registry's Java stores need keytool (Java 17+): apt-get install openjdk-17-jre-headless"
    exit 1
  }
  log "making the schema registry's certificates and Java stores in $TLS"
  (
    cd "$TLS"
    rm -f registry-* .registry-ready
    sign() { # name CA-prefix extended-key-usage
      openssl req -newkey rsa:2048 -nodes -subj "/CN=$1" -keyout "$1.key" -out "$1.csr" 2>/dev/null
      printf 'subjectAltName=DNS:localhost\nextendedKeyUsage=%s\n' "$3" >"$1.ext"
      openssl x509 -req -in "$1.csr" -CA "$2.pem" -CAkey "$2.key" -CAcreateserial -days 3650 \
        -extfile "$1.ext" -out "$1.pem" 2>/dev/null
    }
    sign registry-server ca serverAuth
    sign registry-client ca clientAuth
    sign registry-client-other other-ca clientAuth
    keytool -importcert -noprompt -alias flexrun-ca -file ca.pem -keystore registry-truststore.jks \
      -storetype JKS -storepass "$SR_TRUSTSTORE_PASSWORD" >/dev/null 2>&1
    keytool -importcert -noprompt -alias flexrun-ca -file ca.pem -keystore registry-truststore.p12 \
      -storetype PKCS12 -storepass "$SR_TRUSTSTORE_PASSWORD" >/dev/null 2>&1
    # keytool cannot read a PEM key: openssl packs it, keytool makes the stores from that.
    openssl pkcs12 -export -in registry-client.pem -inkey registry-client.key -certfile ca.pem \
      -name registry-client -passout "pass:$SR_KEYSTORE_PASSWORD" -out registry-client.openssl.p12
    keytool -importkeystore -noprompt -srckeystore registry-client.openssl.p12 -srcstoretype PKCS12 \
      -srcstorepass "$SR_KEYSTORE_PASSWORD" -destkeystore registry-keystore.p12 -deststoretype PKCS12 \
      -deststorepass "$SR_KEYSTORE_PASSWORD" >/dev/null 2>&1
    keytool -importkeystore -noprompt -srckeystore registry-client.openssl.p12 -srcstoretype PKCS12 \
      -srcstorepass "$SR_KEYSTORE_PASSWORD" -srcalias registry-client -destkeystore registry-keystore.jks \
      -deststoretype JKS -deststorepass "$SR_KEYSTORE_PASSWORD" -destalias registry-client \
      -destkeypass "$SR_KEY_PASSWORD" >/dev/null 2>&1
    rm -f registry-client.openssl.p12
    for f in registry-truststore.jks registry-truststore.p12 registry-keystore.p12 registry-keystore.jks; do
      [ -s "$f" ] || { log "keytool did not make $TLS/$f"; exit 1; }
    done
  )
  touch "$TLS/.registry-ready"
}

install_bqemulator() {
  if [ -x "$VENV/bin/bqemulator" ] && [ -f "$VENV/.flexrun-ready" ]; then
    return
  fi
  log "installing bqemulator $BQEMULATOR_VERSION into $VENV"
  rm -rf "$VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check \
    "bqemulator==$BQEMULATOR_VERSION" "duckdb==$DUCKDB_VERSION" numpy \
    "duckdb-extension-spatial==$DUCKDB_VERSION" >"$STACK/bqemulator-install.log" 2>&1 || {
    tail -30 "$STACK/bqemulator-install.log" >&2
    exit 1
  }
  # bqemulator asks DuckDB to download the spatial extension at start-up; there is no
  # network for that, so put the copy the PyPI package ships where DuckDB looks first.
  local ext
  ext=$(find "$VENV" -name spatial.duckdb_extension -path "*v$DUCKDB_VERSION*" | head -1)
  [ -n "$ext" ] || { log "spatial extension not found in the venv"; exit 1; }
  mkdir -p "$HOME/.duckdb/extensions/v$DUCKDB_VERSION/linux_amd64"
  cp "$ext" "$HOME/.duckdb/extensions/v$DUCKDB_VERSION/linux_amd64/"
  touch "$VENV/.flexrun-ready"
}

# gcp-storage-emulator: a Cloud Storage JSON API server in Python, from PyPI.
install_gcs_emulator() {
  if [ -f "$GCS_VENV/.flexrun-ready" ]; then
    return
  fi
  log "installing gcp-storage-emulator $GCS_EMULATOR_VERSION into $GCS_VENV"
  python3 -m venv "$GCS_VENV"
  "$GCS_VENV/bin/pip" install --quiet --disable-pip-version-check \
    "gcp-storage-emulator==$GCS_EMULATOR_VERSION" >"$STACK/gcs-install.log" 2>&1 || {
    tail -30 "$STACK/gcs-install.log" >&2
    exit 1
  }
  touch "$GCS_VENV/.flexrun-ready"
}

install() {
  mkdir -p "$STACK"
  # One install at a time (scripts/test.sh installs in the background while it builds,
  # and a demo may start meanwhile): the second waits for the first, then finds it done.
  exec 9>"$STACK/.install.lock"
  flock 9
  install_kafka
  build_validator
  install_tls
  install_registry_tls
  install_bqemulator
  install_gcs_emulator
  # Release the lock now: `start` goes on to launch the daemons from this shell, and an
  # open descriptor would pass to them and hold the lock for as long as the stack runs.
  flock -u 9
  exec 9>&-
}

wait_port() { # host port seconds what
  local i
  for ((i = 0; i < $3 * 10; i++)); do
    if (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; then return 0; fi
    sleep 0.1
  done
  log "$4 did not accept connections on $1:$2 within $3 s"
  return 1
}

is_running() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

# Settings every node shares. Each is a Kafka broker config; docs/local-stack.md
# quotes the sentence of Kafka's documentation behind each.
common_config() { # replication
  cat <<EOF
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
# A group's first member gets its partitions at once, not after 3 s.
group.initial.rebalance.delay.ms=0
offsets.topic.replication.factor=$1
transaction.state.log.replication.factor=$1
transaction.state.log.min.isr=$(($1 > 1 ? 2 : 1))
# No time-based retention by default: Kafka deletes by the records' own timestamps, and
# the kafka-to-gcs tests write records stamped in 2023 to place them in windows, which a
# 7-day retention deletes within a retention check (seen: 87 of 100 records gone before
# the job read them). A test of retention sets retention.ms on its own topic, or calls
# DeleteRecords. Retention and compaction act within a second when asked.
log.retention.ms=-1
log.retention.check.interval.ms=1000
log.cleaner.backoff.ms=500
# Records up to 16 MiB (the large-record tests send 9.9 MB and 15 MB; a topic's
# max.message.bytes may lower it) and fetches that carry them.
message.max.bytes=16777216
replica.fetch.max.bytes=16777216
socket.request.max.bytes=104857600
auto.create.topics.enable=false
num.partitions=1
# Durable as a production broker by default: every write acknowledged by acks=all is in
# the page cache of every in-sync replica; the OS flushes (Kafka's default, not fsync).
unclean.leader.election.enable=false
EOF
}

# The single node: PLAINTEXT, SASL_SSL and SSL listeners and its own controller.
single_config() {
  local p=$KAFKA_PORT
  cat <<EOF
process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=127.0.0.1:$((p + 3))
listeners=PLAINTEXT://127.0.0.1:$p,SASL_SSL://127.0.0.1:$((p + 1)),SSL://127.0.0.1:$((p + 2)),CONTROLLER://127.0.0.1:$((p + 3))
advertised.listeners=PLAINTEXT://127.0.0.1:$p,SASL_SSL://localhost:$((p + 1)),SSL://localhost:$((p + 2))
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL,SSL:SSL,CONTROLLER:PLAINTEXT
log.dirs=$RUN/kafka/data
ssl.keystore.type=PKCS12
ssl.keystore.location=$TLS/broker.p12
ssl.keystore.password=$TLS_PASSWORD
ssl.truststore.type=PEM
ssl.truststore.location=$TLS/ca.pem
ssl.client.auth=requested
sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-512,OAUTHBEARER
listener.name.sasl_ssl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_$SASL_USER="$SASL_PASSWORD";
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
# OAUTHBEARER as Google Managed Kafka takes it: the token Google's GcpLoginCallbackHandler
# makes from an access token (scripts/kafka/validator checks its shape and the access
# token's prefix; Kafka's unsecured validator would refuse it, wanting alg "none").
listener.name.sasl_ssl.oauthbearer.sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required unsecuredLoginStringClaim_sub="broker" googleAccessTokenPrefix="$GOOGLE_TOKEN_PREFIX";
listener.name.sasl_ssl.oauthbearer.sasl.server.callback.handler.class=flexrun.GoogleTokenValidator
EOF
  common_config 1
}

cluster_config() { # node id
  local i=$1 c=$CLUSTER_PORT
  cat <<EOF
process.roles=broker,controller
node.id=$i
controller.quorum.voters=1@127.0.0.1:$((c + 11)),2@127.0.0.1:$((c + 12)),3@127.0.0.1:$((c + 13))
listeners=PLAINTEXT://127.0.0.1:$((c + i)),CONTROLLER://127.0.0.1:$((c + 10 + i))
advertised.listeners=PLAINTEXT://127.0.0.1:$((c + i))
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs=$RUN/cluster/node$i/data
default.replication.factor=3
min.insync.replicas=2
# A dead broker leaves the ISR after 6 s (Kafka's default is 30 s), so the tests that
# kill one see the shrink and the election within their budget.
replica.lag.time.max.ms=6000
broker.session.timeout.ms=6000
broker.heartbeat.interval.ms=500
EOF
  common_config 3
}

# Compile the OAUTHBEARER validator against the broker's own jars (once per source).
build_validator() {
  [ -f "$VALIDATOR/flexrun/GoogleTokenValidator.class" ] && return
  command -v javac >/dev/null || {
    log "the broker's OAUTHBEARER validator needs javac (17+): apt-get install openjdk-17-jdk-headless"
    exit 1
  }
  mkdir -p "$VALIDATOR"
  javac -d "$VALIDATOR" -cp "$KAFKA_LIB/*" "$VALIDATOR_SRC"
}

java_run() { # log file, then the class and its arguments
  local out=$1
  shift
  # 512 MiB of heap per node (measured in docs/local-stack.md); the JVM's own logging
  # configuration is the stack's.
  exec nohup java -Xms256m -Xmx${FLEXRUN_KAFKA_HEAP:-512m} -XX:+UseG1GC -XX:MaxGCPauseMillis=20 \
    -Djava.awt.headless=true -Dlog4j2.configurationFile="$HERE/kafka/log4j2.yaml" \
    -cp "$KAFKA_LIB/*:$VALIDATOR" "$@" >>"$out" 2>&1
}

format_node() { # dir config cluster-id [extra args]
  local dir=$1 conf=$2 id=$3
  shift 3
  java -Xmx256m -Dlog4j2.configurationFile="$HERE/kafka/log4j2.yaml" -cp "$KAFKA_LIB/*" \
    kafka.tools.StorageTool format -t "$id" -c "$conf" --ignore-formatted "$@" >"$dir/format.log" 2>&1 || {
    cat "$dir/format.log" >&2
    exit 1
  }
}

start_single_kafka() {
  mkdir -p "$RUN/kafka"
  single_config >"$RUN/kafka/server.properties"
  if [ ! -f "$RUN/kafka/data/meta.properties" ]; then
    format_node "$RUN/kafka" "$RUN/kafka/server.properties" "$(cluster_id)" --standalone \
      --add-scram "SCRAM-SHA-512=[name=$SASL_USER,password=$SASL_PASSWORD]"
  fi
  (java_run "$RUN/kafka.log" kafka.Kafka "$RUN/kafka/server.properties") &
  echo $! >"$RUN/kafka.pid"
}

# A KRaft cluster id: 16 random bytes, URL-safe base64 without padding.
cluster_id() { head -c16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n'; }

# Wait until the broker answers a metadata request, not only a TCP connect; give up at
# once if its process (pid file $3, when given) has died.
wait_kafka() { # bootstrap seconds [pidfile]
  local deadline=$((SECONDS + $2))
  while [ $SECONDS -lt $deadline ]; do
    if [ -n "${3:-}" ] && ! is_running "$3"; then
      log "Kafka's process ($3) exited while starting"
      return 1
    fi
    if timeout 20 java -Xmx128m -XX:TieredStopAtLevel=1 -Dlog4j2.configurationFile="$HERE/kafka/log4j2.yaml" \
      -cp "$KAFKA_LIB/*" org.apache.kafka.tools.BrokerApiVersionsCommand --bootstrap-server "$1" >/dev/null 2>&1; then
      return 0
    fi
    sleep 0.5
  done
  log "Kafka at $1 did not answer a metadata request within $2 s"
  return 1
}

start() {
  set_names "${1:-demo}"
  install
  mkdir -p "$RUN"
  if is_running "$RUN/kafka.pid" && is_running "$RUN/bq.pid" && is_running "$RUN/registry.pid" && is_running "$RUN/gcs.pid" \
    && is_running "$RUN/secrets.pid" && is_running "$RUN/tokens.pid"; then
    log "stack '$NAME' already running"
    return
  fi
  stop "$NAME" >/dev/null 2>&1 || true
  rm -rf "$RUN/data" "$RUN/kafka" "$RUN/cluster" "$RUN/kafka.log" && mkdir -p "$RUN/data"
  start_single_kafka
  (cd "$RUN/data" && FLEXRUN_BQ_FAULT_PORT=$BQ_FAULT_PORT exec nohup "$VENV/bin/python" "$HERE/bqemulator_launcher.py" start \
    --rest-port "$BQ_REST_PORT" --grpc-port "$BQ_GRPC_PORT" \
    --project "$BQ_PROJECT" --log-level warning >"$RUN/bq.log" 2>&1) &
  echo $! >"$RUN/bq.pid"
  (cd "$RUN/data" && exec nohup python3 "$HERE/schema_registry.py" --port "$REGISTRY_PORT" \
    --state "$RUN/data/registry.json" \
    --tls-port "$REGISTRY_TLS_PORT" --tls-cert "$TLS/registry-server.pem" --tls-key "$TLS/registry-server.key" \
    --tls-ca "$TLS/ca.pem" --bearer-port "$REGISTRY_BEARER_PORT" --bearer-prefix "$OAUTH_TOKEN_PREFIX" \
    --adc-port "$REGISTRY_ADC_PORT" --adc-prefix "$GOOGLE_TOKEN_PREFIX" >"$RUN/registry.log" 2>&1) &
  echo $! >"$RUN/registry.pid"
  (cd "$RUN/data" && exec nohup python3 "$HERE/secret_manager.py" --port "$SECRETS_PORT" \
    --state "$RUN/data/secrets.json" --token-prefix "$GOOGLE_TOKEN_PREFIX" >"$RUN/secrets.log" 2>&1) &
  echo $! >"$RUN/secrets.pid"
  (cd "$RUN/data" && exec nohup python3 "$HERE/token_endpoint.py" --port "$TOKEN_PORT" \
    --client-id "$OAUTH_CLIENT_ID" --client-secret "$OAUTH_CLIENT_SECRET" --token-prefix "$OAUTH_TOKEN_PREFIX" \
    --google-token-prefix "$GOOGLE_TOKEN_PREFIX" >"$RUN/tokens.log" 2>&1) &
  echo $! >"$RUN/tokens.pid"
  (cd "$RUN/data" && exec nohup "$GCS_VENV/bin/python" "$HERE/gcs_emulator_launcher.py" --port "$GCS_PORT" \
    --bucket "$GCS_BUCKET" >"$RUN/gcs.log" 2>&1) &
  echo $! >"$RUN/gcs.pid"
  wait_kafka "127.0.0.1:$KAFKA_PORT" 90 "$RUN/kafka.pid" || { grep -m3 -A3 ERROR "$RUN/kafka.log" >&2; exit 1; }
  wait_port 127.0.0.1 "$BQ_REST_PORT" 90 "bqemulator REST" || { tail -20 "$RUN/bq.log" >&2; exit 1; }
  wait_port 127.0.0.1 "$BQ_GRPC_PORT" 30 "bqemulator gRPC" || { tail -20 "$RUN/bq.log" >&2; exit 1; }
  wait_port 127.0.0.1 "$REGISTRY_PORT" 30 "schema registry" || { tail -20 "$RUN/registry.log" >&2; exit 1; }
  for p in "$REGISTRY_TLS_PORT" "$REGISTRY_BEARER_PORT" "$REGISTRY_ADC_PORT"; do
    wait_port 127.0.0.1 "$p" 30 "schema registry" || { tail -20 "$RUN/registry.log" >&2; exit 1; }
  done
  wait_port 127.0.0.1 "$SECRETS_PORT" 30 "secret manager" || { tail -20 "$RUN/secrets.log" >&2; exit 1; }
  wait_port 127.0.0.1 "$TOKEN_PORT" 30 "token endpoint" || { tail -20 "$RUN/tokens.log" >&2; exit 1; }
  wait_port 127.0.0.1 "$GCS_PORT" 30 "gcs emulator" || { tail -20 "$RUN/gcs.log" >&2; exit 1; }
  env_vars "$NAME" >"$RUN/env"
  log "stack '$NAME' up: kafka 127.0.0.1:$KAFKA_PORT (SASL_SSL localhost:$((KAFKA_PORT + 1)), SSL localhost:$((KAFKA_PORT + 2))), bigquery REST :$BQ_REST_PORT gRPC :$BQ_GRPC_PORT, schema registry :$REGISTRY_PORT (TLS :$REGISTRY_TLS_PORT, OAuth :$REGISTRY_BEARER_PORT, ADC :$REGISTRY_ADC_PORT), cloud storage :$GCS_PORT (bucket $GCS_BUCKET), secret manager :$SECRETS_PORT, token endpoint :$TOKEN_PORT (logs in $RUN)"
}

start_node() { # NAME id
  set_names "$1"
  local i=$2 dir=$RUN/cluster/node$2
  [ -f "$dir/server.properties" ] || { log "no cluster node $i in $RUN (run cluster-start first)"; exit 1; }
  (java_run "$dir/kafka.log" kafka.Kafka "$dir/server.properties") &
  echo $! >"$dir/pid"
}

cluster_start() {
  set_names "${1:-demo}"
  install
  local i id
  for i in 1 2 3; do stop_pid "$RUN/cluster/node$i/pid"; done
  rm -rf "$RUN/cluster"
  id=$(cluster_id)
  for i in 1 2 3; do
    mkdir -p "$RUN/cluster/node$i"
    cluster_config "$i" >"$RUN/cluster/node$i/server.properties"
    format_node "$RUN/cluster/node$i" "$RUN/cluster/node$i/server.properties" "$id"
  done
  for i in 1 2 3; do start_node "$NAME" "$i"; done
  wait_kafka "$(cluster_bootstrap)" 120 "$RUN/cluster/node1/pid" || { tail -20 "$RUN/cluster/node1/kafka.log" >&2; exit 1; }
  log "cluster '$NAME' up: $(cluster_bootstrap)"
}

cluster_bootstrap() {
  echo "127.0.0.1:$((CLUSTER_PORT + 1)),127.0.0.1:$((CLUSTER_PORT + 2)),127.0.0.1:$((CLUSTER_PORT + 3))"
}

kill_node() { # NAME id
  set_names "$1"
  local f=$RUN/cluster/node$2/pid
  [ -f "$f" ] && kill -KILL "$(cat "$f")" 2>/dev/null || true
  rm -f "$f"
}

stop_pid() {
  local f=$1
  [ -f "$f" ] || return 0
  local pid
  pid=$(cat "$f")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$f"
}

stop() {
  set_names "${1:-demo}"
  stop_pid "$RUN/kafka.pid"
  for i in 1 2 3; do stop_pid "$RUN/cluster/node$i/pid"; done
  stop_pid "$RUN/bq.pid"
  stop_pid "$RUN/registry.pid"
  stop_pid "$RUN/gcs.pid"
  stop_pid "$RUN/secrets.pid"
  stop_pid "$RUN/tokens.pid"
  log "stack '$NAME' stopped"
}

status() {
  set_names "${1:-demo}"
  for s in kafka bq registry gcs secrets tokens; do
    if is_running "$RUN/$s.pid"; then echo "$s running (pid $(cat "$RUN/$s.pid"))"; else echo "$s stopped"; fi
  done
  for i in 1 2 3; do
    is_running "$RUN/cluster/node$i/pid" && echo "cluster node $i running (pid $(cat "$RUN/cluster/node$i/pid"))"
  done
  env_vars "$NAME"
}

env_vars() {
  set_names "${1:-demo}"
  echo "export FLEXRUN_KAFKA=127.0.0.1:$KAFKA_PORT"
  echo "export FLEXRUN_KAFKA_SASL_SSL=localhost:$((KAFKA_PORT + 1))"
  echo "export FLEXRUN_KAFKA_SSL=localhost:$((KAFKA_PORT + 2))"
  echo "export FLEXRUN_KAFKA_SASL_USER=$SASL_USER"
  echo "export FLEXRUN_KAFKA_SASL_PASSWORD=$SASL_PASSWORD"
  echo "export FLEXRUN_GOOGLE_TOKEN_PREFIX=$GOOGLE_TOKEN_PREFIX"
  echo "export FLEXRUN_KAFKA_TLS_DIR=$TLS"
  echo "export FLEXRUN_KAFKA_CLUSTER=$(cluster_bootstrap)"
  echo "export FLEXRUN_STACK_SH=$HERE/stack.sh"
  echo "export FLEXRUN_KAFKA_LIB=$KAFKA_LIB"
  echo "export FLEXRUN_STACK_NAME=$NAME"
  echo "export BIGQUERY_EMULATOR_HOST=127.0.0.1:$BQ_REST_PORT"
  echo "export BIGQUERY_STORAGE_EMULATOR_HOST=127.0.0.1:$BQ_GRPC_PORT"
  echo "export FLEXRUN_BQ_PROJECT=$BQ_PROJECT"
  echo "export FLEXRUN_BQ_FAULTS=127.0.0.1:$BQ_FAULT_PORT"
  echo "export FLEXRUN_SCHEMA_REGISTRY=http://127.0.0.1:$REGISTRY_PORT"
  echo "export STORAGE_EMULATOR_HOST=127.0.0.1:$GCS_PORT"
  echo "export FLEXRUN_GCS_BUCKET=$GCS_BUCKET"
  # Google Secret Manager's stand-in (base URL; /v1/projects/P/secrets/S/versions/V:access)
  # and the token endpoint (client credentials; Google's jwt-bearer and refresh grants).
  echo "export FLEXRUN_SECRET_MANAGER=http://127.0.0.1:$SECRETS_PORT"
  echo "export FLEXRUN_TOKEN_ENDPOINT=http://127.0.0.1:$TOKEN_PORT/token"
  echo "export FLEXRUN_OAUTH_CLIENT_ID=$OAUTH_CLIENT_ID"
  echo "export FLEXRUN_OAUTH_CLIENT_SECRET=$OAUTH_CLIENT_SECRET"
  echo "export FLEXRUN_OAUTH_TOKEN_PREFIX=$OAUTH_TOKEN_PREFIX"
  # The registry's authenticated listeners (one state with FLEXRUN_SCHEMA_REGISTRY).
  echo "export FLEXRUN_SCHEMA_REGISTRY_TLS=https://localhost:$REGISTRY_TLS_PORT"
  echo "export FLEXRUN_SCHEMA_REGISTRY_BEARER=http://127.0.0.1:$REGISTRY_BEARER_PORT"
  echo "export FLEXRUN_SCHEMA_REGISTRY_ADC=http://127.0.0.1:$REGISTRY_ADC_PORT$SR_GOOGLE_PATH"
  echo "export FLEXRUN_SCHEMA_REGISTRY_CA=$TLS/ca.pem"
  echo "export FLEXRUN_SCHEMA_REGISTRY_CLIENT_CERT=$TLS/registry-client.pem"
  echo "export FLEXRUN_SCHEMA_REGISTRY_CLIENT_KEY=$TLS/registry-client.key"
  echo "export FLEXRUN_SCHEMA_REGISTRY_OTHER_CLIENT_CERT=$TLS/registry-client-other.pem"
  echo "export FLEXRUN_SCHEMA_REGISTRY_OTHER_CLIENT_KEY=$TLS/registry-client-other.key"
  echo "export FLEXRUN_SCHEMA_REGISTRY_TRUSTSTORE_JKS=$TLS/registry-truststore.jks"
  echo "export FLEXRUN_SCHEMA_REGISTRY_TRUSTSTORE_P12=$TLS/registry-truststore.p12"
  echo "export FLEXRUN_SCHEMA_REGISTRY_TRUSTSTORE_PASSWORD=$SR_TRUSTSTORE_PASSWORD"
  echo "export FLEXRUN_SCHEMA_REGISTRY_KEYSTORE_JKS=$TLS/registry-keystore.jks"
  echo "export FLEXRUN_SCHEMA_REGISTRY_KEYSTORE_P12=$TLS/registry-keystore.p12"
  echo "export FLEXRUN_SCHEMA_REGISTRY_KEYSTORE_PASSWORD=$SR_KEYSTORE_PASSWORD"
  echo "export FLEXRUN_SCHEMA_REGISTRY_KEY_PASSWORD=$SR_KEY_PASSWORD"
}

# SIGKILL the broker and start it again on the same data (the chaos suite's broker fault).
restart_kafka() {
  set_names "${1:-demo}"
  [ -f "$RUN/kafka.pid" ] && kill -KILL "$(cat "$RUN/kafka.pid")" 2>/dev/null || true
  sleep 1
  (java_run "$RUN/kafka.log" kafka.Kafka "$RUN/kafka/server.properties") &
  echo $! >"$RUN/kafka.pid"
  wait_kafka "127.0.0.1:$KAFKA_PORT" 90 "$RUN/kafka.pid"
  log "kafka restarted"
}

cmd=${1:-}
shift || true
case "$cmd" in
  install) install ;;
  start) start "$@" ;;
  stop) stop "$@" ;;
  status) status "$@" ;;
  env) env_vars "$@" ;;
  restart-kafka) restart_kafka "$@" ;;
  cluster-start) cluster_start "$@" ;;
  kill-node) kill_node "$@" ;;
  start-node) start_node "$@" ;;
  # Kafka's jars (resolved if missing), for tools that run one of Kafka's classes.
  kafka-lib) mkdir -p "$STACK"; install_kafka; echo "$KAFKA_LIB" ;;
  # The Cloud Storage emulator's Python (installed if missing), for bench-commit.sh.
  gcs-python) mkdir -p "$STACK"; install_gcs_emulator; echo "$GCS_VENV/bin/python" ;;
  *) echo "usage: $0 install|start|stop|status|env|cluster-start|restart-kafka [NAME] | kill-node|start-node NAME ID | kafka-lib" >&2; exit 2 ;;
esac
