#!/usr/bin/env python3
"""Least-privilege checks of deploy/ (deploy/lint.sh all; docs/security.md, "Deployment").

usage: deploy/lint_privilege.py chart RENDERED.yaml   the chart rendered with its default values
       deploy/lint_privilege.py compose COMPOSE.yaml  compose.yaml, and what git tracks beside it

Prints every problem found, then exits 1 if there was one.
"""
import re
import subprocess
import sys
from urllib.parse import parse_qs, urlsplit

import yaml

problems = []


def problem(msg):
    problems.append(msg)


SECRET_NAME = re.compile(r"PASSWORD|SECRET|TOKEN|(^|_)KEY($|_)", re.I)
INLINE_SECRET_FLAG = re.compile(r"^--[a-z0-9-]*(password|secret|-key)=", re.I)
# TLS that does not check the server: clickhouse-go's skip_verify, and the like.
NO_VERIFY = re.compile(r"skip[_-]?verify=(true|1)|insecure[_-]?skip|sslmode=(allow|prefer|require|verify-ca)\b", re.I)


def pg_sslmode(url):
    """The sslmode of a PostgreSQL URL (libpq's default: prefer)."""
    return parse_qs(urlsplit(url).query).get("sslmode", ["prefer"])[0]


def ch_user(url):
    """The user a ClickHouse URL logs in as."""
    return urlsplit(url).username or "default"


def args_of(container):
    """A container's arguments, as strings."""
    return [str(a) for a in container.get("args", []) or []]


def flag(args, name):
    """The last value of --name=… in args, or None."""
    vals = [a.split("=", 1)[1] for a in args if a.startswith("--" + name + "=")]
    return vals[-1] if vals else None


def check_chart(path):
    docs = [d for d in yaml.safe_load_all(open(path)) if d]
    kinds = {}
    for d in docs:
        kinds.setdefault(d["kind"], []).append(d)
    config = {}
    for cm in kinds.get("ConfigMap", []):
        for k, v in (cm.get("data") or {}).items():
            config[k] = v
            if NO_VERIFY.search(str(v)):
                problem(f"chart: ConfigMap {cm['metadata']['name']} sets {k} to TLS that does not verify the server: {v}")
            if SECRET_NAME.search(k) and v:
                problem(f"chart: ConfigMap {cm['metadata']['name']} holds {k}: secrets belong in a Secret")

    # Services stay inside the cluster.
    for svc in kinds.get("Service", []):
        spec = svc.get("spec", {})
        t = spec.get("type", "ClusterIP")
        if t != "ClusterIP" or spec.get("externalIPs"):
            problem(f"chart: Service {svc['metadata']['name']} is {t}: by default nothing is exposed beyond the cluster")

    # Every workload's pods are selected by a NetworkPolicy that lets in only
    # the namespace's pods.
    policies = kinds.get("NetworkPolicy", [])
    workloads = kinds.get("Deployment", []) + kinds.get("StatefulSet", [])
    ch = {}
    for w in workloads:
        name = w["metadata"]["name"]
        tmpl = w["spec"]["template"]
        labels = tmpl["metadata"].get("labels", {})
        covering = [p for p in policies
                    if "Ingress" in p["spec"].get("policyTypes", ["Ingress"])
                    and all(labels.get(k) == v for k, v in p["spec"]["podSelector"].get("matchLabels", {}).items())]
        if not covering:
            problem(f"chart: no NetworkPolicy selects the pods of {name}: their metrics and status are open to the whole cluster")
        for p in covering:
            for rule in p["spec"].get("ingress", []) or []:
                peers = rule.get("from")
                if not peers:
                    problem(f"chart: NetworkPolicy {p['metadata']['name']} lets in every source")
                for peer in peers or []:
                    if "namespaceSelector" in peer or "ipBlock" in peer:
                        problem(f"chart: NetworkPolicy {p['metadata']['name']} lets in {peer} by default: beyond the namespace")
        for c in tmpl["spec"].get("containers", []):
            for e in c.get("env", []) or []:
                if SECRET_NAME.search(e["name"]) and "value" in e:
                    problem(f"chart: {name}/{c['name']} sets {e['name']} as a literal: take it from a Secret (secretKeyRef)")
                ref = (e.get("valueFrom") or {})
                if SECRET_NAME.search(e["name"]) and "value" not in e and "secretKeyRef" not in ref:
                    problem(f"chart: {name}/{c['name']} takes {e['name']} from elsewhere than a Secret")
            for ef in c.get("envFrom", []) or []:
                if "configMapRef" in ef and any(SECRET_NAME.search(k) for k in config):
                    problem(f"chart: {name}/{c['name']} gets a secret from a ConfigMap")
            args = args_of(c)
            for a in args:
                if NO_VERIFY.search(a):
                    problem(f"chart: {name}/{c['name']} uses TLS that does not verify the server: {a}")
                if INLINE_SECRET_FLAG.match(a) and not re.match(r"^--[a-z0-9-]*-file=", a):
                    problem(f"chart: {name}/{c['name']} passes a secret on its command line: {a.split('=')[0]}=…; use the --*-file flag")
            mounted = {v["name"]: v for v in tmpl["spec"].get("volumes", [])}
            for m in c.get("volumeMounts", []) or []:
                if m["mountPath"] == "/etc/walhouse/secrets" and "secret" not in mounted.get(m["name"], {}):
                    problem(f"chart: {name}/{c['name']} mounts /etc/walhouse/secrets from something else than a Secret")
            for pg in [flag(args, "pg"), config.get("WALHOUSE_SOURCE_POSTGRES_URL"), config.get("WALHOUSE_PG_URL")]:
                if pg and pg_sslmode(pg) != "verify-full":
                    problem(f"chart: {name} connects to PostgreSQL with sslmode={pg_sslmode(pg)}: want verify-full (the certificate and the host name checked)")
            comp = tmpl["metadata"]["labels"].get("app.kubernetes.io/component", name)
            url = flag(args, "clickhouse") or config.get("WALHOUSE_CLICKHOUSE_URL")
            if comp in ("sink", "serve", "verify") and url:
                ch[comp] = (ch_user(url), flag(args, "clickhouse-password-file"))
    if "sink" in ch and "serve" in ch:
        if ch["sink"][0] == ch["serve"][0]:
            problem(f"chart: the sink and serve log in to ClickHouse as the same user {ch['sink'][0]!r}: serve needs its own, which cannot load")
        if ch["sink"][1] and ch["sink"][1] == ch["serve"][1]:
            problem("chart: the sink and serve read the same ClickHouse password file")
    elif "sink" not in ch:
        problem("chart: the sink has no ClickHouse URL")
    # verify records its rounds (and --repair writes rows): serve's user,
    # which cannot load, would fail every round.
    if "verify" in ch and "serve" in ch and ch["verify"][0] == ch["serve"][0]:
        problem(f"chart: verify logs in to ClickHouse as serve's user {ch['serve'][0]!r}, which cannot write _walhouse_verify: give it the sink's or its own (docs/security.md)")


def check_compose(path):
    c = yaml.safe_load(open(path))
    services = c.get("services", {})
    base = path.rsplit("/", 1)[0] if "/" in path else "."
    tracked = subprocess.run(["git", "ls-files", "--", base + "/compose/secrets"], capture_output=True, text=True, check=True).stdout.split()
    for f in tracked:
        if not f.endswith("/.gitignore"):
            problem(f"compose: {f} is committed: secrets are generated (compose/generate-secrets.sh), never committed")
    for name, spec in (c.get("secrets") or {}).items():
        f = spec.get("file", "")
        if not f.startswith("./compose/secrets/"):
            problem(f"compose: secret {name} is read from {f}, outside the generated compose/secrets/")
    ch = {}
    for name, svc in services.items():
        env = svc.get("environment") or {}
        if isinstance(env, list):
            env = dict(e.split("=", 1) if "=" in e else (e, None) for e in env)
        for k, v in env.items():
            if SECRET_NAME.search(k) and not k.endswith("_FILE") and v not in (None, ""):
                problem(f"compose: {name} sets {k} as a literal: give it as a secret file (…_FILE)")
        for p in svc.get("ports", []) or []:
            if not str(p).startswith("127.0.0.1:"):
                problem(f"compose: {name} publishes {p} on every interface: bind 127.0.0.1")
        cmd = [str(a) for a in svc.get("command", []) or []] if isinstance(svc.get("command"), list) else []
        for a in cmd:
            if NO_VERIFY.search(a) and not a.startswith("--pg="):
                problem(f"compose: {name} uses TLS that does not verify the server: {a}")
            if INLINE_SECRET_FLAG.match(a) and not re.match(r"^--[a-z0-9-]*-file=", a):
                problem(f"compose: {name} passes a secret on its command line: {a.split('=')[0]}=…")
            if a.startswith("--pg="):
                mode = pg_sslmode(a[5:])
                if mode not in ("verify-full", "disable"):
                    problem(f"compose: {name} connects to PostgreSQL with sslmode={mode}: TLS that does not verify; verify-full (or disable inside the compose network)")
        if name in ("sink", "serve"):
            url = flag(cmd, "clickhouse")
            if url:
                ch[name] = (ch_user(url), flag(cmd, "clickhouse-password-file"))
        if name == "serve" and not flag(cmd, "audit-key-file"):
            problem("compose: serve has no --audit-key-file: its audit key would be derived from the cursor secret")
        if name == "grafana" and "GF_SECURITY_ADMIN_PASSWORD__FILE" not in env:
            problem("compose: Grafana's admin password is not from a secret (GF_SECURITY_ADMIN_PASSWORD__FILE): it is admin/admin")
    if "sink" in ch and "serve" in ch and (ch["sink"][0] == ch["serve"][0] or ch["sink"][1] == ch["serve"][1]):
        problem(f"compose: the sink and serve share a ClickHouse user or password ({ch['sink']}, {ch['serve']}): serve needs its own, which cannot load")


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("chart", "compose"):
        sys.exit(__doc__)
    {"chart": check_chart, "compose": check_compose}[sys.argv[1]](sys.argv[2])
    for p in problems:
        print(f"[lint-deploy] least privilege: {p}", file=sys.stderr)
    if problems:
        sys.exit(1)
    print(f"[lint-deploy] least privilege: {sys.argv[1]} {sys.argv[2].rsplit('/', 1)[-1]} passes", file=sys.stderr)


if __name__ == "__main__":
    main()
