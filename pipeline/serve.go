package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/walhouse/walhouse/erasure"
	"github.com/walhouse/walhouse/idempotency"
	"github.com/walhouse/walhouse/kafka"
	"github.com/walhouse/walhouse/monitor"
	"github.com/walhouse/walhouse/query"
)

// ServeRun is everything `walhouse serve` runs: the query API, its key
// file, its lag probe and its erasures.
type ServeRun struct {
	ClickHouse ClickHouse
	// Listen is the API's address.
	Listen string
	// Keys is the API keys file, read again every KeysReload (0: only on
	// Reload) and on every signal of Reload (SIGHUP).
	Keys       *query.KeyFile
	KeysReload time.Duration
	Reload     <-chan os.Signal
	// PG is the captured PostgreSQL's connection string with its password,
	// for the slot's lag, the erasures' check and the consistency tokens'
	// source (empty: none of them).
	PG string
	// Kafka is where the sink's consumer lag and the dead-letter depth are
	// read (nil: not reported).
	Kafka *kafka.Config
	// Monitor configures the lag probe: Slot, Group, Prefix, Captures and
	// CaptureTimeout (PG, Kafka and DLQTopic are set here). The probe runs
	// when PG, Kafka or Captures is set.
	Monitor monitor.Config
	// TokenSource is the database whose consistency tokens reads accept,
	// as SYSID.OID (empty: read on PG, or none).
	TokenSource string
	// ErasureKeys enables POST /v1/erasures (nil: off); it needs PG.
	// EraseSettle is the wait between the ledger entry and the removal.
	ErasureKeys *erasure.Keys
	EraseSettle time.Duration
	// JWT accepts bearer JWTs beside the API keys (nil: off).
	JWT *query.JWTOptions
	// Query is the rest of the server's configuration (CORS, cursor
	// secret, limits, audit key, lag history, token waits); RunServe sets
	// its connections, keys, probe, eraser, registry and logger.
	Query query.Config
}

// RunServe serves the query API of r until ctx ends, then drains requests
// for up to 10 s.
func RunServe(ctx context.Context, r ServeRun) error {
	conn, err := r.ClickHouse.Open(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), r.Keys)
	var pgPool *pgxpool.Pool
	if r.PG != "" {
		if pgPool, err = OpenPG(ctx, r.PG); err != nil {
			return fmt.Errorf("--pg: %w", err)
		}
		defer pgPool.Close()
	}
	cfg := r.Query
	cfg.Conn, cfg.Database, cfg.Keys, cfg.Registry, cfg.Logger = conn, r.ClickHouse.Database, r.Keys, reg, slog.Default()
	if cfg.TokenSource, err = tokenSourceOf(ctx, r.TokenSource, pgPool); err != nil {
		return err
	}
	if r.ErasureKeys != nil {
		if pgPool == nil {
			return errors.New("the erasure key is set but --pg is not: POST /v1/erasures checks PostgreSQL before it erases; give --pg")
		}
		// An interface: a nil *erasure.Eraser must stay a nil eraser.
		eraser, err := erasure.NewEraser(erasure.Config{PG: pgPool, Conn: conn, Database: r.ClickHouse.Database, Keys: *r.ErasureKeys, Settle: r.EraseSettle})
		if err != nil {
			return err
		}
		cfg.Eraser = eraser
	}
	closeProbe, err := r.probe(ctx, &cfg, pgPool)
	if err != nil {
		return err
	}
	defer closeProbe()
	if r.JWT != nil {
		// The JWKS refresh of a URL ends with ctx, as serve does.
		if cfg.JWT, err = query.NewJWTAuth(ctx, *r.JWT); err != nil {
			return err
		}
	}
	api, err := query.NewServer(cfg)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", r.Listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w; pass another --listen", r.Listen, err)
	}
	return r.serve(ctx, api, ln, NewClickHouseReadiness(conn, slog.Default()).Checks)
}

// probe sets cfg's lag probe when r asks for one; the function returned
// closes its Kafka client.
func (r ServeRun) probe(ctx context.Context, cfg *query.Config, pgPool *pgxpool.Pool) (func(), error) {
	if pgPool == nil && r.Kafka == nil && len(r.Monitor.Captures) == 0 {
		return func() {}, nil
	}
	pc := r.Monitor
	pc.DLQTopic = kafka.DeadLetterTopic(pc.Prefix)
	if pgPool != nil {
		pc.PG = pgPool
	}
	closeKafka := func() {}
	if r.Kafka != nil {
		cl, err := kafka.NewClient(ctx, *r.Kafka)
		if err != nil {
			return nil, err
		}
		closeKafka = cl.Close
		pc.Kafka = kadm.NewClient(cl)
	}
	cfg.Pipeline = monitor.NewProbe(pc)
	return closeKafka, nil
}

// serve runs api on ln, with its lag history and the key file's reloads,
// until ctx ends, then shuts it down.
func (r ServeRun) serve(ctx context.Context, api *query.Server, ln net.Listener, ready Readiness) error {
	srv := api.HTTPServer()
	srv.Handler = WithHealth(srv.Handler, ready)
	// The lag history sampler and the key file's reloads run as long as
	// the server, and are waited for.
	bgCtx, stopBackground := context.WithCancel(ctx)
	histDone, keysDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(histDone)
		_ = api.Run(bgCtx) // returns nil when bgCtx ends
	}()
	go func() {
		defer close(keysDone)
		_ = r.Keys.Run(bgCtx, r.KeysReload, r.Reload) // returns nil when bgCtx ends
	}()
	defer func() {
		stopBackground()
		<-keysDone
		<-histDone
	}()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	slog.Info("serve: query API listening", "addr", ln.Addr().String(), "database", r.ClickHouse.Database)
	select {
	case err := <-errc:
		return fmt.Errorf("serve HTTP: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := srv.Shutdown(sctx)
	<-errc
	// Erasures run detached from their requests: they get a while more,
	// then record their failure, before the connections close.
	api.WaitErasures(sctx)
	if err != nil {
		return fmt.Errorf("shut down the HTTP server: %w", err)
	}
	slog.Info("serve: stopped")
	return nil
}

// tokenSourceOf is the database whose consistency tokens serve accepts:
// flagValue (--token-source), else read on pg, else none (token reads
// refused).
func tokenSourceOf(ctx context.Context, flagValue string, pg *pgxpool.Pool) (idempotency.Token, error) {
	if flagValue != "" {
		src, err := idempotency.ParseSource(flagValue)
		if err != nil {
			return idempotency.Token{}, fmt.Errorf("--token-source: %w", err)
		}
		return src, nil
	}
	if pg == nil {
		slog.Info("serve: no --pg nor --token-source: reads with consistency tokens are refused (tokens_unavailable)")
		return idempotency.Token{}, nil
	}
	tok, err := idempotency.ReadToken(ctx, pg)
	if err != nil {
		return idempotency.Token{}, fmt.Errorf("--pg: read the database's identity for consistency tokens (or give --token-source): %w", err)
	}
	tok.LSN = 0
	return tok, nil
}
