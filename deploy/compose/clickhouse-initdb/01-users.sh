#!/bin/bash
# ClickHouse users of deploy/compose.yaml, made at the first start (the image runs this with the
# server up, as CLICKHOUSE_USER): the sink's, which owns walhouse's database and writes it, and
# serve's, which reads it and may erase subjects (ALTER … DELETE, the erasure ledger) but change no
# table's rows otherwise, nor its schema. Neither may manage users. docs/security.md, "Deployment".
set -euo pipefail
sink=$(tr -d '\n' </run/secrets/clickhouse_sink_password)
serve=$(tr -d '\n' </run/secrets/clickhouse_serve_password)
clickhouse client --user "$CLICKHOUSE_USER" --password "$(tr -d '\n' <"$CLICKHOUSE_PASSWORD_FILE")" --multiquery <<SQL
CREATE DATABASE IF NOT EXISTS walhouse;
CREATE USER IF NOT EXISTS walhouse_sink IDENTIFIED WITH sha256_password BY '$sink';
GRANT ALL ON walhouse.* TO walhouse_sink;
CREATE USER IF NOT EXISTS walhouse_serve IDENTIFIED WITH sha256_password BY '$serve';
GRANT SELECT ON walhouse.* TO walhouse_serve;
GRANT ALTER DELETE ON walhouse.* TO walhouse_serve;
GRANT CREATE TABLE, INSERT ON walhouse._walhouse_erasures TO walhouse_serve;
GRANT CREATE TABLE, INSERT, ALTER ADD COLUMN ON walhouse._walhouse_erasure_manifests TO walhouse_serve;
SQL
