#!/usr/bin/env bash
# Validates deploy/ with what installs offline (no Docker engine, no cluster).
#
# usage: deploy/lint.sh rules   the alert rules: every metric they and the dashboard use exists in
#                               the code, promtool check rules, promtool test rules (make test)
#        deploy/lint.sh all     rules, then: every YAML and JSON file parses, prometheus.yml is a
#                               valid config, helm lint and helm template (rendered output parsed,
#                               every object with apiVersion and kind), docker compose config, and
#                               the Dockerfile's images pinned and user non-root, and least privilege
#                               (lint_privilege.py: NetworkPolicies, no Service or port beyond the
#                               namespace or host, secrets from Secrets and generated files only,
#                               PostgreSQL TLS verify-full, separate ClickHouse users; make lint-deploy)
#
# Installs what is missing, quietly: promtool from Debian's prometheus package, yamllint and
# PyYAML from Debian, docker-compose (v1, which validates the file) from Debian when the docker
# client has no compose plugin, helm from its Go module (helm.sh/helm/v3, built once into
# .local/tools/bin). deploy/README.md says what this does not check.
set -euo pipefail

_here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
# shellcheck source=local/lib/common.sh
. "$_here/local/lib/common.sh"
log() { printf '[lint-deploy] %s\n' "$*" >&2; }
die() { printf '[lint-deploy] error: %s\n' "$*" >&2; exit 1; }

HELM_VERSION=v3.22.0
TOOLS=$LOCAL_DIR/tools/bin
cd "$REPO_ROOT"

# metric_names: every walhouse_* metric the dashboard's and the rules' queries use must be one
# the code defines (histogram series by their base name).
check_metric_names() {
	local defined used missing=()
	defined=$(grep -rhoE '"walhouse_[a-z0-9_]+"' --include='*.go' --exclude='*_test.go' . | tr -d '"' | sort -u)
	used=$(python3 - <<-'PY'
		import json, re, yaml
		exprs = []
		def walk(o):
		    if isinstance(o, dict):
		        for k, v in o.items():
		            if k == "expr" and isinstance(v, str):
		                exprs.append(v)
		            else:
		                walk(v)
		    elif isinstance(o, list):
		        for v in o:
		            walk(v)
		walk(json.load(open("deploy/grafana/walhouse.json")))
		walk(yaml.safe_load(open("deploy/prometheus/alerts.yml")))
		names = set()
		for e in exprs:
		    for n in re.findall(r"\bwalhouse_[a-z0-9_]+", e):
		        names.add(re.sub(r"_(bucket|sum|count)$", "", n))
		print("\n".join(sorted(names)))
	PY
	)
	for m in $used; do
		grep -qx "$m" <<<"$defined" || missing+=("$m")
	done
	[[ ${#missing[@]} -eq 0 ]] || die "metrics used in deploy/ but defined nowhere in the code: ${missing[*]}"
	log "metric names: $(wc -w <<<"$used") used, all defined"
}

need_python_yaml() {
	python3 -c 'import yaml' 2>/dev/null || apt_install python3-yaml
}

cmd_rules() {
	need_cmd promtool prometheus
	need_python_yaml
	check_metric_names
	promtool check rules deploy/prometheus/alerts.yml >/dev/null || promtool check rules deploy/prometheus/alerts.yml
	(cd deploy/prometheus && promtool test rules alerts_test.yml >/dev/null) ||
		(cd deploy/prometheus && promtool test rules alerts_test.yml)
	log "alert rules: promtool check rules and test rules pass"
}

helm_bin() {
	if command -v helm >/dev/null 2>&1; then
		command -v helm
		return
	fi
	if [[ ! -x $TOOLS/helm ]]; then
		log "building helm $HELM_VERSION from its Go module (once, a few minutes)"
		GOBIN=$TOOLS go install "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" >&2 || die "go install helm.sh/helm/v3/cmd/helm@$HELM_VERSION failed"
	fi
	echo "$TOOLS/helm"
}

cmd_all() {
	cmd_rules
	need_cmd yamllint yamllint
	local f
	# Helm templates are Go templates, not YAML: they are checked rendered.
	yamllint -c deploy/.yamllint $(find deploy \( -name '*.yaml' -o -name '*.yml' \) -not -path '*/templates/*' | sort) >&2
	for f in $(find deploy -name '*.json' | sort); do
		python3 -m json.tool "$f" >/dev/null || die "$f is not JSON"
	done
	log "YAML and JSON: every file parses"
	promtool check config --syntax-only deploy/prometheus/prometheus.yml >/dev/null
	log "prometheus.yml: valid syntax"

	local helm out
	helm=$(helm_bin)
	"$helm" lint --strict deploy/helm/walhouse >/dev/null || "$helm" lint --strict deploy/helm/walhouse
	out=$(mktemp -d)
	trap 'rm -rf "$out"' RETURN
	"$helm" template walhouse deploy/helm/walhouse >"$out/default.yaml"
	"$helm" template t deploy/helm/walhouse --set serviceMonitor.enabled=true,serve.enabled=false,secrets.existingSecret=s \
		--set 'secrets.existingSecretKeys={pg-password,clickhouse-password}' --set 'capture.tables={public.orders,public.items}' --set config.clickhouseCluster=analytics >"$out/variant.yaml"
	python3 - "$out/default.yaml" "$out/variant.yaml" <<-'PY'
		import sys, yaml
		for path in sys.argv[1:]:
		    docs = [d for d in yaml.safe_load_all(open(path)) if d]
		    for d in docs:
		        if not d.get("apiVersion") or not d.get("kind") or not d.get("metadata", {}).get("name"):
		            sys.exit(f"{path}: an object without apiVersion, kind or name: {d}")
		    print(f"[lint-deploy] helm template {path.rsplit('/', 1)[1]}: {len(docs)} objects: " + ", ".join(sorted({d['kind'] for d in docs})), file=sys.stderr)
	PY
	grep -q 'WALHOUSE_CLICKHOUSE_CLUSTER: "analytics"' "$out/variant.yaml" || die "helm: config.clickhouseCluster does not reach WALHOUSE_CLICKHOUSE_CLUSTER"
	log "helm: lint --strict and template pass"
	python3 deploy/lint_privilege.py chart "$out/default.yaml"
	# The optional verify Deployment must be as closed as the others.
	"$helm" template walhouse deploy/helm/walhouse --set verify.enabled=true --set 'verify.tables={public.orders}' >"$out/verify.yaml"
	python3 deploy/lint_privilege.py chart "$out/verify.yaml"

	if docker compose version >/dev/null 2>&1; then
		docker compose -f deploy/compose.yaml config -q
		log "compose.yaml: docker compose config passes"
	else
		need_cmd docker-compose docker-compose
		docker-compose -f deploy/compose.yaml config -q
		log "compose.yaml: docker-compose config passes (the docker client has no compose plugin)"
	fi

	python3 deploy/lint_privilege.py compose deploy/compose.yaml

	local df=deploy/docker/Dockerfile
	if grep -E '^FROM ' "$df" | grep -vE '^FROM [^ :]+:[^ ]+' | grep -q .; then
		die "$df: every FROM needs a pinned tag"
	fi
	grep -E '^FROM ' "$df" | grep -q ':latest' && die "$df: no :latest"
	grep -qE '^USER (65532|nonroot)' "$df" || die "$df: the image must run as a non-root USER"
	log "Dockerfile: images pinned, user non-root"
}

case ${1:-} in
rules) cmd_rules ;;
all) cmd_all ;;
*)
	sed -n '2,/^set/{/^set/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"
	exit 2
	;;
esac
