package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/walhouse/walhouse/clickhouse"
	"github.com/walhouse/walhouse/query"
)

// runServe serves the query API until ctx ends, then drains requests for
// up to 10 s.
func runServe(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	var ep endpoints
	ep.register(fs, false, false, true)
	var (
		listen       = fs.String("listen", envOr("WALHOUSE_LISTEN", "127.0.0.1:8080"), "address of the HTTP API (env WALHOUSE_LISTEN)")
		keysFile     = fs.String("keys", envOr("WALHOUSE_API_KEYS_FILE", ""), "JSON file of API keys: [{\"id\",\"hash\",\"tenant\",\"scopes\"}] (env WALHOUSE_API_KEYS_FILE)")
		cursorSecret = fs.String("cursor-secret", "", "secret (16+ bytes) that signs pagination cursors, better given by WALHOUSE_CURSOR_SECRET or --cursor-secret-file (a flag shows in the process list); generated when none is given, and then cursors do not survive a restart")
		defaultRows  = fs.Int("default-limit", 100, "rows per page when a query sets no limit")
		maxRows      = fs.Int("max-limit", 10_000, "largest page a query may ask for")
		maxExec      = fs.Duration("max-execution-time", 30*time.Second, "longest a query may run in ClickHouse")
		maxResult    = fs.Int("max-result-rows", 0, "ClickHouse max_result_rows for reads (default max-limit+1)")
		maxConc      = fs.Int("max-concurrent", 4, "queries and exports one tenant may run at once (more get 429)")
		hashKey      = fs.Bool("hash-key", false, "read an API key from stdin, print its SHA-256 for the keys file, and exit")
		newKey       = fs.Bool("new-key", false, "generate an API key, print it and its keys-file entry (with -key-id, -key-tenant, -key-scopes), and exit")
		keyID        = fs.String("key-id", "", "with -new-key: id of the key")
		keyTenant    = fs.String("key-tenant", "", "with -new-key: tenant of the key")
		keyScopes    = fs.String("key-scopes", "read", "with -new-key: comma-separated scopes (read, export, admin)")
		lagPG        = fs.String("pg", envOr("WALHOUSE_PG_URL", ""), "PostgreSQL URL, to report the slot's lag in /v1/lag and /metrics (optional; env WALHOUSE_PG_URL)")
		lagSlot      = fs.String("slot", envOr("WALHOUSE_SLOT", "walhouse"), "capture's replication slot (env WALHOUSE_SLOT)")
		lagKafka     = fs.String("kafka", envOr("WALHOUSE_KAFKA_BROKERS", ""), "Kafka brokers, to report consumer lag and dead-letter depth (optional; env WALHOUSE_KAFKA_BROKERS)")
		lagGroup     = fs.String("group", envOr("WALHOUSE_GROUP", "walhouse-sink"), "the sink's consumer group (env WALHOUSE_GROUP)")
		lagPrefix    = fs.String("topic-prefix", envOr("WALHOUSE_TOPIC_PREFIX", "walhouse"), "the pipeline's topic prefix (env WALHOUSE_TOPIC_PREFIX)")
		lagCaptures  = fs.String("capture-url", envOr("WALHOUSE_CAPTURE_URL", ""), "comma-separated --metrics-addr (or http://host:port) of the capture processes, to report their producer backlog in /v1/lag and /metrics (optional; env WALHOUSE_CAPTURE_URL)")
		lagTimeout   = fs.Duration("capture-timeout", query.DefaultCaptureTimeout, "longest wait for one capture's status; an unreachable capture is reported down, never fails /v1/lag")
		histEvery    = fs.Duration("lag-history-interval", query.DefaultHistoryInterval, "how often the lag is sampled for /v1/lag/history and the status page's charts")
		histSpan     = fs.Duration("lag-history-span", query.DefaultHistorySpan, "how much lag history is kept in memory")
	)
	ep.kafkaSec.register(fs)
	ep.registerPGPassword(fs)
	cursorSecretSrc := registerSecret(fs, "cursor-secret-file", "WALHOUSE_CURSOR_SECRET", "the secret that signs pagination cursors")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *hashKey {
		line, err := bufio.NewReader(os.Stdin).ReadString('\n')
		if err != nil && line == "" {
			return fmt.Errorf("read the key from stdin: %w (pipe it in: echo -n \"$KEY\" | walhouse serve --hash-key)", err)
		}
		fmt.Println(query.HashKey(strings.TrimSpace(line)))
		return nil
	}
	if *newKey {
		return printNewKey(*keyID, *keyTenant, *keyScopes)
	}

	var problems []error
	if *keysFile == "" {
		problems = append(problems, errors.New("--keys is not set (nor WALHOUSE_API_KEYS_FILE): create a keys file with entries from `walhouse serve --new-key`"))
	}
	if *cursorSecret == "" {
		v, err := cursorSecretSrc.value()
		if err != nil {
			problems = append(problems, err)
		}
		*cursorSecret = v
	}
	secret := []byte(*cursorSecret)
	if len(secret) > 0 && len(secret) < 16 {
		problems = append(problems, fmt.Errorf("--cursor-secret has %d bytes; use at least 16 random bytes", len(secret)))
	}
	var captures []string
	for _, c := range strings.Split(*lagCaptures, ",") {
		if strings.TrimSpace(c) == "" {
			continue
		}
		u, err := query.CaptureStatusURL(c)
		if err != nil {
			problems = append(problems, fmt.Errorf("--capture-url: %w", err))
			continue
		}
		captures = append(captures, u)
	}
	if *lagTimeout <= 0 {
		problems = append(problems, fmt.Errorf("--capture-timeout %v: want a positive duration, e.g. 2s", *lagTimeout))
	}
	if err := errors.Join(problems...); err != nil {
		return err
	}
	keys, err := query.LoadKeys(*keysFile)
	if err != nil {
		return err
	}
	if len(secret) == 0 {
		secret = make([]byte, 32)
		if _, err := rand.Read(secret); err != nil {
			return fmt.Errorf("generate a cursor secret: %w", err)
		}
		slog.Warn("serve: no --cursor-secret; generated one, so pagination cursors will not survive a restart (set WALHOUSE_CURSOR_SECRET)")
	}
	chDSN, err := ep.clickhouseDSN()
	if err != nil {
		return err
	}
	conn, err := clickhouse.Open(ctx, chDSN)
	if err != nil {
		return err
	}
	defer conn.Close()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	var probe query.PipelineProbe
	if *lagPG != "" || *lagKafka != "" || len(captures) > 0 {
		pc := query.PipelineConfig{Slot: *lagSlot, Group: *lagGroup, Prefix: *lagPrefix, DLQTopic: *lagPrefix + "-dlq", Captures: captures, CaptureTimeout: *lagTimeout}
		if *lagPG != "" {
			pgURL, err := ep.pgConnString(*lagPG)
			if err != nil {
				return err
			}
			pool, err := pgxpool.New(ctx, pgURL)
			if err != nil {
				return fmt.Errorf("--pg: %w", err)
			}
			defer pool.Close()
			pc.PG = pool
		}
		if *lagKafka != "" {
			ep.kafka = *lagKafka
			kc, err := ep.kafkaConfig()
			if err != nil {
				return err
			}
			cl, err := kafkaClient(ctx, kc)
			if err != nil {
				return err
			}
			defer cl.Close()
			pc.Kafka = kadm.NewClient(cl)
		}
		probe = query.NewPipelineProbe(pc)
	}
	api, err := query.NewServer(query.Config{
		Pipeline:     probe,
		Conn:         conn,
		Database:     ep.database,
		Keys:         keys,
		CursorSecret: secret,
		Limits: query.Limits{
			DefaultRows: *defaultRows, MaxRows: *maxRows, MaxExecutionTime: *maxExec,
			MaxResultRows: *maxResult, MaxConcurrent: *maxConc,
		},
		Registry:        reg,
		Logger:          slog.Default(),
		HistoryInterval: *histEvery,
		HistorySpan:     *histSpan,
	})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w; pass another --listen", *listen, err)
	}
	srv := &http.Server{Handler: api, ReadHeaderTimeout: 10 * time.Second}
	// The lag history sampler runs as long as the server, and is waited for.
	histCtx, stopHistory := context.WithCancel(ctx)
	histDone := make(chan struct{})
	go func() {
		defer close(histDone)
		_ = api.Run(histCtx) // returns nil when histCtx ends
	}()
	defer func() {
		stopHistory()
		<-histDone
	}()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	slog.Info("serve: query API listening", "addr", ln.Addr().String(), "database", ep.database)
	select {
	case err := <-errc:
		return fmt.Errorf("serve HTTP: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = srv.Shutdown(sctx)
	<-errc
	if err != nil {
		return fmt.Errorf("shut down the HTTP server: %w", err)
	}
	slog.Info("serve: stopped")
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
	for _, s := range strings.Split(scopes, ",") {
		if s = strings.TrimSpace(s); s != "" {
			entry.Scopes = append(entry.Scopes, query.Scope(s))
		}
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
func runExport(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("export", flag.ContinueOnError)
	var ep endpoints
	ep.register(fs, false, false, true)
	var (
		tenant  = fs.String("tenant", "", "tenant whose rows are exported (required)")
		column  = fs.String("subject-column", "", "column that identifies the subject, e.g. customer_id (required)")
		subject = fs.String("subject", "", "value of the subject column (required)")
		tables  listFlag
		out     = fs.String("out", "", "file to write (required); the manifest goes to <out>.manifest.json")
		format  = fs.String("format", "", "jsonl, csv or parquet (default: csv for a .csv file, parquet for a .parquet file, else jsonl)")
		maxExec = fs.Duration("max-execution-time", 30*time.Minute, "longest one table's query may run")
	)
	fs.Var(&tables, "tables", "tables to export, comma-separated (default: every table with the subject column)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	var problems []error
	for name, v := range map[string]string{"--tenant": *tenant, "--subject-column": *column, "--subject": *subject, "--out": *out} {
		if v == "" {
			problems = append(problems, fmt.Errorf("%s is required", name))
		}
	}
	if err := errors.Join(problems...); err != nil {
		return err
	}
	f := query.Format(*format)
	if f == "" {
		switch strings.ToLower(filepath.Ext(*out)) {
		case ".csv":
			f = query.CSV
		case ".parquet":
			f = query.Parquet
		default:
			f = query.JSONL
		}
	}
	chDSN, err := ep.clickhouseDSN()
	if err != nil {
		return err
	}
	conn, err := clickhouse.Open(ctx, chDSN)
	if err != nil {
		return err
	}
	defer conn.Close()
	file, err := os.Create(*out)
	if err != nil {
		return fmt.Errorf("create %s: %w", *out, err)
	}
	defer file.Close()
	w := bufio.NewWriterSize(file, 1<<20)

	var rows atomic.Int64
	start := time.Now()
	done := make(chan struct{})
	progressDone := make(chan struct{})
	go func() {
		defer close(progressDone)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				n := rows.Load()
				fmt.Fprintf(os.Stderr, "\rexport: %d rows, %.0f rows/s   ", n, float64(n)/time.Since(start).Seconds())
			}
		}
	}()
	by := "cli"
	if u := os.Getenv("USER"); u != "" {
		by += ":" + u
	}
	m, err := query.NewExporter(conn, ep.database, slog.Default()).Export(ctx, w, query.ExportRequest{
		Tenant: *tenant, Subject: query.Subject{Column: *column, Value: *subject}, Tables: tables,
		Format: f, RequestedBy: by, MaxExecutionTime: *maxExec, Rows: &rows,
	})
	close(done)
	<-progressDone
	if ferr := w.Flush(); err == nil && ferr != nil {
		err = fmt.Errorf("write %s: %w", *out, ferr)
	}
	if cerr := file.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("close %s: %w", *out, cerr)
	}
	n := rows.Load()
	fmt.Fprintf(os.Stderr, "\rexport: %d rows, %.0f rows/s, done in %s\n", n, float64(n)/time.Since(start).Seconds(), time.Since(start).Round(time.Millisecond))
	if m.ID == "" {
		_ = os.Remove(*out) // refused before anything was written
		return err
	}
	mb, _ := json.MarshalIndent(m, "", "  ")
	if werr := os.WriteFile(*out+".manifest.json", append(mb, '\n'), 0o644); werr != nil && err == nil {
		err = fmt.Errorf("write the manifest: %w", werr)
	}
	if err != nil {
		return fmt.Errorf("export stopped early (the manifest says complete=false): %w", err)
	}
	fmt.Fprintf(os.Stderr, "export: %s (%d rows, sha256 %s), manifest %s.manifest.json\n", *out, m.Rows, m.SHA256, *out)
	return nil
}
