//go:build !nochdb

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"syscall"

	"github.com/walhouse/walhouse/cli"
	"github.com/walhouse/walhouse/harness/chdb"
)

// runChdb serves the embedded ClickHouse engine (libchdb.so) over
// ClickHouse's HTTP interface until ctx ends: the ClickHouse "server" of the
// integration tests, the benchmarks and the demo.
func runChdb(ctx context.Context, inv *cli.Invocation) error {
	fs := flag.NewFlagSet("chdb", flag.ContinueOnError)
	lib := fs.String("lib", os.Getenv(cli.ChdbLibEnv), "path of libchdb.so (env WALHOUSE_CHDB_LIB)")
	path := fs.String("path", "", "data directory of the engine (created if missing)")
	listen := fs.String("listen", "127.0.0.1:8123", "address for ClickHouse's HTTP interface")
	maxBody := fs.Int64("max-body", chdb.DefaultMaxBodySize, "largest request body in bytes, after decompression")
	if err := inv.Parse(fs); err != nil {
		return err
	}
	var problems []error
	if *lib == "" {
		problems = append(problems, errors.New("-lib is not set (nor WALHOUSE_CHDB_LIB): run `make services` to download libchdb.so into .local/chdb/, then pass -lib .local/chdb/libchdb.so"))
	} else if _, err := os.Stat(*lib); err != nil {
		problems = append(problems, fmt.Errorf("-lib %s: %w; run `make services` to download libchdb.so", *lib, err))
	}
	if err := errors.Join(problems...); err != nil {
		return err
	}

	// Listen before loading the 500 MB library, so a busy port fails fast.
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return fmt.Errorf("listen on %s: the port is in use (is another `walhouse chdb` or a ClickHouse server running?); stop it or pass another -listen", *listen)
		}
		return fmt.Errorf("listen on %s: %w", *listen, err)
	}
	defer ln.Close()

	engine, err := chdb.Open(*lib, *path)
	if err != nil {
		return fmt.Errorf("start the engine: %w", err)
	}
	defer engine.Close()

	srv, err := chdb.NewServer(engine, chdb.WithMaxBodySize(*maxBody), chdb.WithLogger(slog.Default()))
	if err != nil {
		return err
	}
	slog.Info("chdb: serving ClickHouse HTTP", "addr", ln.Addr().String(), "version", engine.Version(), "path", *path)
	if err := srv.Serve(ctx, ln); err != nil {
		return err
	}
	slog.Info("chdb: stopped")
	return nil
}
