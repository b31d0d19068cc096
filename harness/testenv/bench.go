package testenv

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// BenchMain is a benchmark's main: it runs run and, when it fails, prints
// the error after name (for example "bench sink") and exits with status 1.
func BenchMain(name string, run func() error) {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, name+":", err)
		os.Exit(1)
	}
}

// BenchContext returns the context of a benchmark's run: it ends on SIGINT
// or SIGTERM (so the benchmark still cleans up) or after timeout. It also
// sets slog's default logger to warnings and errors on stderr, which the
// components a benchmark runs in-process log through, so that their info
// lines do not drown its figures. The caller calls cancel when done.
func BenchContext(timeout time.Duration) (ctx context.Context, cancel context.CancelFunc) {
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	ctx, cancelTimeout := context.WithTimeout(ctx, timeout)
	return ctx, func() { cancelTimeout(); stop() }
}
