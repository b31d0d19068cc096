package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/walhouse/walhouse/cli"
	"github.com/walhouse/walhouse/erasure"
	"github.com/walhouse/walhouse/monitor"
	"github.com/walhouse/walhouse/pipeline"
	"github.com/walhouse/walhouse/query"
)

// serveFlags are serve's flags but the endpoints' and the limits'.
type serveFlags struct {
	listen, keysFile, corsOrigins                        string
	jwtJWKS, jwtClaim, jwtIssuer, jwtAudience, jwtScopes string
	cursorSecret                                         string
	keysReload, maxExec, lagTimeout, histEvery, histSpan time.Duration
	eraseSettle, tokenWait, maxTokenWait                 time.Duration
	defaultRows, maxRows, maxResult, maxConc             int
	hashKey, newKey, auditHash                           bool
	keyID, keyTenant, keyScopes                          string
	lagPG, lagSlot, lagKafka, lagGroup, lagPrefix        string
	lagCaptures, auditKeyFile, tokenSource               string
	lim                                                  query.Limits
	hl                                                   query.HTTPLimits
	inFlight                                             int
	erasureKey, cursorSecretSrc                          *cli.SecretSource
}

// register registers the flags on fs, and the endpoints' that serve
// adds to ep.
func (f *serveFlags) register(fs *flag.FlagSet, ep *cli.Endpoints) {
	fs.StringVar(&f.listen, "listen", "127.0.0.1:8080", "address of the HTTP API")
	fs.StringVar(&f.keysFile, "keys", "", "JSON file of API keys: [{\"id\",\"hash\",\"tenant\",\"scopes\"}]")
	fs.DurationVar(&f.keysReload, "keys-reload", query.DefaultKeysReload, "how often the keys file is read again when it changed, so keys added or revoked take effect without a restart (SIGHUP reads it at once; 0: on SIGHUP only)")
	fs.StringVar(&f.corsOrigins, "cors-origin", "", "comma-separated origins (https://host[:port], or *) whose browser pages may call the API; none by default")
	fs.StringVar(&f.jwtJWKS, "jwt-jwks", "", "accept bearer JWTs signed by a key of this JWK Set (a file, or an https:// URL refreshed hourly) beside API keys; none by default")
	fs.StringVar(&f.jwtClaim, "jwt-tenant-claim", "tenant", "with --jwt-jwks: the claim that holds the tenant, a non-empty string")
	fs.StringVar(&f.jwtIssuer, "jwt-issuer", "", "with --jwt-jwks: the iss a token must have (recommended)")
	fs.StringVar(&f.jwtAudience, "jwt-audience", "", "with --jwt-jwks: the aud a token must have (recommended)")
	fs.StringVar(&f.jwtScopes, "jwt-scopes", "read", "with --jwt-jwks: comma-separated scopes a token grants (read, export)")
	fs.StringVar(&f.cursorSecret, "cursor-secret", "", "secret (16+ bytes) that signs pagination cursors, better given by WALHOUSE_API_CURSOR_SECRET or --cursor-secret-file (a flag shows in the process list); generated when none is given, and then cursors do not survive a restart")
	fs.IntVar(&f.defaultRows, "default-limit", 100, "rows per page when a query sets no limit")
	fs.IntVar(&f.maxRows, "max-limit", 10_000, "largest page a query may ask for")
	fs.DurationVar(&f.maxExec, "max-execution-time", 30*time.Second, "longest a query may run in ClickHouse")
	fs.IntVar(&f.maxResult, "max-result-rows", 0, "ClickHouse max_result_rows for reads (default max-limit+1)")
	fs.IntVar(&f.maxConc, "max-concurrent", 4, "queries and exports one tenant may run at once (more get 429)")
	fs.BoolVar(&f.hashKey, "hash-key", false, "read an API key from stdin, print its SHA-256 for the keys file, and exit")
	fs.BoolVar(&f.newKey, "new-key", false, "generate an API key, print it and its keys-file entry (with -key-id, -key-tenant, -key-scopes), and exit; walhouse apikey create also adds it to the file")
	fs.StringVar(&f.keyID, "key-id", "", "with -new-key: id of the key")
	fs.StringVar(&f.keyTenant, "key-tenant", "", "with -new-key: tenant of the key")
	fs.StringVar(&f.keyScopes, "key-scopes", "read", "with -new-key: comma-separated scopes (read, export, erase, admin)")
	fs.StringVar(&f.lagPG, "pg", "", "PostgreSQL URL, to report the slot's lag in /v1/lag and /metrics and to check PostgreSQL before POST /v1/erasures (optional)")
	fs.StringVar(&f.lagSlot, "slot", "walhouse", "capture's replication slot")
	fs.StringVar(&f.lagKafka, "kafka", "", "Kafka brokers, to report consumer lag and dead-letter depth (optional)")
	fs.StringVar(&f.lagGroup, "group", "walhouse-sink", "the sink's consumer group")
	fs.StringVar(&f.lagPrefix, "topic-prefix", "walhouse", "the pipeline's topic prefix")
	fs.StringVar(&f.lagCaptures, "capture-url", "", "comma-separated --metrics-addr (or http://host:port) of the capture processes, to report their producer backlog in /v1/lag and /metrics (optional)")
	fs.DurationVar(&f.lagTimeout, "capture-timeout", monitor.DefaultCaptureTimeout, "longest wait for one capture's status; an unreachable capture is reported down, never fails /v1/lag")
	fs.DurationVar(&f.histEvery, "lag-history-interval", monitor.DefaultHistoryInterval, "how often the lag is sampled for /v1/lag/history and the status page's charts")
	fs.DurationVar(&f.histSpan, "lag-history-span", monitor.DefaultHistorySpan, "how much lag history is kept in memory")
	fs.StringVar(&f.auditKeyFile, "audit-key-file", "", "file holding the key (16+ bytes) of the HMAC-SHA256 that export audit entries record instead of the subject value (or env WALHOUSE_API_AUDIT_KEY; default: derived from the cursor secret)")
	fs.DurationVar(&f.eraseSettle, "erasure-settle", erasure.DefaultSettle, "POST /v1/erasures: wait between recording the ledger entry and removing rows, so every sink has read it; more than the sinks' --erasure-max-age plus an insert's duration (docs/erasure.md)")
	fs.StringVar(&f.tokenSource, "token-source", "", "the captured database as SYSID.OID (pg_control_system()'s system_identifier, pg_database's oid), whose consistency tokens reads accept; default: read with --pg; without either, token reads are refused")
	fs.DurationVar(&f.tokenWait, "token-wait", query.DefaultTokenWait, "how long a read with consistency tokens waits for its tables to load when it names no wait")
	fs.DurationVar(&f.maxTokenWait, "max-token-wait", query.DefaultMaxWait, "the longest wait a read with consistency tokens may ask for")
	fs.BoolVar(&f.auditHash, "audit-hash", false, "read a subject value from stdin, print the subject_hmac an export audit entry records for it under this server's audit key, and exit")
	limitFlags(fs, &f.lim, &f.hl, &f.inFlight)
	f.erasureKey = registerErasureKey(fs)
	ep.KafkaSec.Register(fs)
	ep.RegisterPGPassword(fs)
	f.cursorSecretSrc = cli.RegisterSecret(fs, "cursor-secret-file", "the secret that signs pagination cursors")
}

// runServe serves the query API until ctx ends, then drains requests for
// up to 10 s.
func runServe(ctx context.Context, inv *cli.Invocation) error {
	fs, ep := cli.NewFlagSet("serve", cli.UsesClickHouse|cli.UsesCluster)
	var f serveFlags
	f.register(fs, ep)
	if err := inv.Parse(fs); err != nil {
		return err
	}
	f.lim.DefaultRows, f.lim.MaxRows, f.lim.MaxExecutionTime, f.lim.MaxResultRows, f.lim.MaxConcurrent = f.defaultRows, f.maxRows, f.maxExec, f.maxResult, f.maxConc
	if f.hashKey {
		return printKeyHash()
	}
	if f.newKey {
		return printNewKey(f.keyID, f.keyTenant, f.keyScopes)
	}
	auditKey, err := readAuditKey(f.auditKeyFile)
	if err != nil {
		return err
	}
	var problems []error
	if f.cursorSecret == "" {
		v, err := f.cursorSecretSrc.Value()
		if err != nil {
			problems = append(problems, err)
		}
		f.cursorSecret = v
	}
	if f.auditHash {
		// After the cursor secret is read from wherever it comes: the
		// audit key derives from it by default.
		if err := errors.Join(problems...); err != nil {
			return err
		}
		return printAuditHash(auditKey, []byte(f.cursorSecret))
	}
	captures, problems := f.check(problems)
	if err := errors.Join(problems...); err != nil {
		return cli.Usage(err)
	}
	keys, err := query.OpenKeyFile(f.keysFile, slog.Default())
	if err != nil {
		return err
	}
	run, err := f.run(ep, keys, auditKey, captures)
	if err != nil {
		return err
	}
	// The keys file is read again on SIGHUP and when it changed, as long
	// as the server runs.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	run.Reload = hup
	return pipeline.RunServe(ctx, run)
}

// check returns the status addresses of --capture-url, and problems with
// the problems of the flags added.
func (f *serveFlags) check(problems []error) (captures []string, _ []error) {
	if f.keysFile == "" {
		problems = append(problems, errors.New("--keys is not set (nor WALHOUSE_API_KEYS_FILE): create one with `walhouse apikey create --keys FILE`"))
	}
	if n := len(f.cursorSecret); n > 0 && n < 16 {
		problems = append(problems, fmt.Errorf("--cursor-secret has %d bytes; use at least 16 random bytes", n))
	}
	for _, c := range strings.Split(f.lagCaptures, ",") {
		if strings.TrimSpace(c) == "" {
			continue
		}
		u, err := monitor.CaptureStatusURL(c)
		if err != nil {
			problems = append(problems, fmt.Errorf("--capture-url: %w", err))
			continue
		}
		captures = append(captures, u)
	}
	if f.keysReload < 0 {
		problems = append(problems, fmt.Errorf("--keys-reload %v: want 0 (on SIGHUP only) or a positive duration, e.g. 10s", f.keysReload))
	}
	if f.lagTimeout <= 0 {
		problems = append(problems, fmt.Errorf("--capture-timeout %v: want a positive duration, e.g. 2s", f.lagTimeout))
	}
	return captures, problems
}

// run resolves the flags into what pipeline.RunServe runs: the secrets,
// the endpoints with their passwords, the query API's settings.
func (f *serveFlags) run(ep *cli.Endpoints, keys *query.KeyFile, auditKey []byte, captures []string) (pipeline.ServeRun, error) {
	secret := []byte(f.cursorSecret)
	if len(secret) == 0 {
		secret = make([]byte, 32)
		if _, err := rand.Read(secret); err != nil {
			return pipeline.ServeRun{}, fmt.Errorf("generate a cursor secret: %w", err)
		}
		slog.Warn("serve: no --cursor-secret; generated one, so pagination cursors will not survive a restart (set WALHOUSE_API_CURSOR_SECRET)")
		if len(auditKey) == 0 {
			slog.Warn("serve: no audit key nor cursor secret; the subject_hmac of export audit entries will not match across restarts (set WALHOUSE_API_AUDIT_KEY)")
		}
	}
	r := pipeline.ServeRun{Listen: f.listen, Keys: keys, KeysReload: f.keysReload, TokenSource: f.tokenSource, EraseSettle: f.eraseSettle,
		Monitor: monitor.Config{Slot: f.lagSlot, Group: f.lagGroup, Prefix: f.lagPrefix, Captures: captures, CaptureTimeout: f.lagTimeout},
		Query: query.Config{CORS: query.CORS{AllowedOrigins: cli.SplitList(f.corsOrigins)}, CursorSecret: secret, Limits: f.lim, MaxInFlight: f.inFlight, HTTP: f.hl, AuditKey: auditKey,
			HistoryInterval: f.histEvery, HistorySpan: f.histSpan, DefaultTokenWait: f.tokenWait, MaxTokenWait: f.maxTokenWait}}
	var err error
	if r.ClickHouse, err = clickHouse(ep); err != nil {
		return r, err
	}
	if f.lagPG != "" {
		if r.PG, err = ep.PGConnString(f.lagPG); err != nil {
			return r, err
		}
	}
	if r.ErasureKeys, err = erasureKeys(f.erasureKey); err != nil {
		return r, err
	}
	if f.lagKafka != "" {
		ep.Kafka = f.lagKafka
		kc, err := ep.KafkaConfig()
		if err != nil {
			return r, err
		}
		r.Kafka = &kc
	}
	if f.jwtJWKS != "" {
		o := query.JWTOptions{JWKS: f.jwtJWKS, TenantClaim: f.jwtClaim, Issuer: f.jwtIssuer, Audience: f.jwtAudience}
		for _, sc := range cli.SplitList(f.jwtScopes) {
			o.Scopes = append(o.Scopes, query.Scope(sc))
		}
		r.JWT = &o
	}
	return r, nil
}

// printKeyHash reads an API key from stdin and prints its hash for the
// keys file (--hash-key).
func printKeyHash() error {
	line, err := bufio.NewReader(os.Stdin).ReadString('\n')
	if err != nil && line == "" {
		return fmt.Errorf("read the key from stdin: %w (pipe it in: echo -n \"$KEY\" | walhouse serve --hash-key)", err)
	}
	fmt.Println(query.HashKey(strings.TrimSpace(line)))
	return nil
}

func printNewKey(id, tenant, scopes string) error {
	secret, err := query.NewSecret()
	if err != nil {
		return err
	}
	if id == "" {
		id = "key-" + time.Now().UTC().Format("20060102-150405")
	}
	entry := query.Key{ID: id, Hash: query.HashKey(secret), Tenant: tenant}
	for _, s := range cli.SplitList(scopes) {
		entry.Scopes = append(entry.Scopes, query.Scope(s))
	}
	b, _ := json.Marshal([]query.Key{entry})
	if _, err := query.ParseKeys(b); err != nil {
		return err
	}
	b, _ = json.Marshal(entry)
	fmt.Printf("key (give it to the caller; it is not stored): %s\nkeys-file entry: %s\n", secret, b)
	return nil
}

// runExport exports every row of one data subject to a file, with a
// manifest next to it, reporting progress on stderr.
func runExport(ctx context.Context, inv *cli.Invocation) error {
	fs, ep := cli.NewFlagSet("export", cli.UsesClickHouse|cli.UsesCluster)
	subj := cli.RegisterSubject(fs, "tables to export")
	var (
		out     = fs.String("out", "", "file to write; the manifest goes to <out>.manifest.json")
		format  = fs.String("format", "", "jsonl, csv or parquet (default: csv for a .csv file, parquet for a .parquet file, else jsonl)")
		maxExec = fs.Duration("export-max-time", 30*time.Minute, "longest the whole export may run")
		maxRows = fs.Int64("export-max-rows", 0, "most rows the export may hold; beyond, it stops with an error (default 0: the serve default, 10,000,000)")
		maxSize = fs.Int64("export-max-bytes", 0, "most bytes the export may hold; beyond, it stops with an error (default 0: the serve default, 10 GiB)")
		auditKF = fs.String("audit-key-file", "", "file holding the audit key, as for serve (or env WALHOUSE_API_AUDIT_KEY); the audit entry records the HMAC of the subject under it")
	)
	// The names before serve's spelling, still accepted.
	cli.DeprecatedFlag(fs, "max-execution-time", "export-max-time")
	cli.DeprecatedFlag(fs, "max-rows", "export-max-rows")
	cli.DeprecatedFlag(fs, "max-bytes", "export-max-bytes")
	if err := inv.Parse(fs); err != nil {
		return err
	}
	auditKey, err := exportAuditKey(*auditKF)
	if err != nil {
		return err
	}
	ch, err := clickHouse(ep)
	if err != nil {
		return err
	}
	by := "cli"
	if u := os.Getenv("USER"); u != "" {
		by += ":" + u
	}
	return pipeline.RunExport(ctx, pipeline.ExportRun{ClickHouse: ch, Out: *out, AuditKey: auditKey, Progress: os.Stderr,
		Request: query.ExportRequest{
			Tenant: subj.Tenant, Subject: query.Subject{Column: subj.Column, Value: subj.Value}, Tables: subj.Tables,
			Format: query.Format(*format), RequestedBy: by,
			Limits: query.Limits{MaxExportTime: *maxExec, MaxExportRows: *maxRows, MaxExportBytes: *maxSize},
		}})
}

// exportAuditKey is the audit key of an export: the one serve uses, so
// that the hashes match (--audit-key-file, WALHOUSE_API_AUDIT_KEY, else
// derived from WALHOUSE_API_CURSOR_SECRET), else a random one, with a
// warning.
func exportAuditKey(file string) ([]byte, error) {
	auditKey, err := readAuditKey(file)
	if err != nil {
		return nil, err
	}
	if auditKey = query.AuditKey(auditKey, []byte(cli.EnvSecret("cursor-secret-file"))); len(auditKey) == 0 {
		auditKey = make([]byte, 32)
		_, _ = rand.Read(auditKey)
		slog.Warn("export: no audit key (WALHOUSE_API_AUDIT_KEY, --audit-key-file) nor WALHOUSE_API_CURSOR_SECRET; the audit entry's subject_hmac cannot be matched later")
	}
	return auditKey, nil
}

// readAuditKey returns the audit key from file, or else from
// WALHOUSE_API_AUDIT_KEY; nil when neither is set. A key is a secret, so it
// never comes from a flag's value (the process list shows those).
func readAuditKey(file string) ([]byte, error) {
	key := []byte(cli.EnvSecret("audit-key-file"))
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("--audit-key-file: %w", err)
		}
		key = bytes.TrimRight(b, "\r\n")
	}
	if len(key) > 0 && len(key) < 16 {
		return nil, fmt.Errorf("the audit key has %d bytes; use at least 16 random bytes", len(key))
	}
	return key, nil
}

// printAuditHash prints the subject_hmac of a value read from stdin.
func printAuditHash(auditKey, cursorSecret []byte) error {
	if auditKey = query.AuditKey(auditKey, cursorSecret); len(auditKey) == 0 {
		return errors.New("--audit-hash needs the server's audit key (WALHOUSE_API_AUDIT_KEY, --audit-key-file) or its cursor secret")
	}
	line, err := bufio.NewReader(os.Stdin).ReadString('\n')
	if err != nil && line == "" {
		return fmt.Errorf("read the subject value from stdin: %w (pipe it in: echo -n \"$VALUE\" | walhouse serve --audit-hash)", err)
	}
	fmt.Println(query.AuditHash(auditKey, strings.TrimRight(line, "\r\n")))
	return nil
}

// limitFlags registers the flags of the per-query ClickHouse limits, the
// export caps, the global concurrency cap and the HTTP server's bounds.
// Zero means the default documented on query.Limits and query.HTTPLimits.
func limitFlags(fs *flag.FlagSet, lim *query.Limits, hl *query.HTTPLimits, inFlight *int) {
	fs.Int64Var(&lim.MaxMemoryUsage, "max-memory-usage", 1<<30, "ClickHouse max_memory_usage of each read and export, in bytes")
	fs.Int64Var(&lim.MaxBytesBeforeExternalGroupBy, "max-bytes-before-external-group-by", 0, "ClickHouse max_bytes_before_external_group_by: a GROUP BY spills to disk beyond it (default 0: half of --max-memory-usage)")
	fs.Int64Var(&lim.MaxBytesBeforeExternalSort, "max-bytes-before-external-sort", 0, "ClickHouse max_bytes_before_external_sort: an ORDER BY spills to disk beyond it (default 0: half of --max-memory-usage)")
	fs.Int64Var(&lim.MaxResultBytes, "max-result-bytes", 64<<20, "ClickHouse max_result_bytes of a read: a larger page is refused")
	fs.Int64Var(&lim.MaxPageBytes, "max-page-bytes", 128<<20, "largest JSON of a read's page, which is streamed: a larger page is refused with over_limit")
	fs.IntVar(&lim.MaxThreads, "max-threads", 4, "ClickHouse max_threads of each read and export")
	fs.DurationVar(&lim.MaxExportTime, "export-max-time", 10*time.Minute, "longest an export may run")
	fs.Int64Var(&lim.MaxExportRows, "export-max-rows", 10_000_000, "most rows one export may hold; beyond, it stops with an error in its manifest")
	fs.Int64Var(&lim.MaxExportBytes, "export-max-bytes", 10<<30, "most bytes one export may hold; beyond, it stops with an error in its manifest")
	fs.IntVar(inFlight, "max-in-flight", query.DefaultMaxInFlight, "reads, exports and table listings the server runs at once, all tenants together (more get 429)")
	fs.DurationVar(&hl.ReadHeaderTimeout, "read-header-timeout", 10*time.Second, "longest a client may take to send a request's headers")
	fs.DurationVar(&hl.ReadTimeout, "read-timeout", 30*time.Second, "longest a client may take to send a whole request")
	fs.DurationVar(&hl.WriteTimeout, "write-timeout", time.Minute, "longest writing a read's response may take; an export gets it for each write instead")
	fs.DurationVar(&hl.IdleTimeout, "idle-timeout", 2*time.Minute, "longest a keep-alive connection may wait for its next request")
	fs.IntVar(&hl.MaxHeaderBytes, "max-header-bytes", 64<<10, "largest request headers accepted, in bytes (more get 431)")
}
