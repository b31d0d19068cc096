package capture

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

func TestConnectionLost(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"server closed the stream", fmt.Errorf("receive from PostgreSQL: %w", io.ErrUnexpectedEOF), true},
		{"connection refused", fmt.Errorf("connect: %w", &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}), true},
		{"reset", fmt.Errorf("x: %w", syscall.ECONNRESET), true},
		{"closed connection used again", fmt.Errorf("read the clock: %w", pgconn.ErrConnClosed), true},
		{"admin shutdown", &pgconn.PgError{Code: "57P01"}, true},
		{"crash shutdown", &pgconn.PgError{Code: "57P02"}, true},
		{"starting up", &pgconn.PgError{Code: "57P03"}, true},
		{"connection failure", &pgconn.PgError{Code: "08006"}, true},
		{"slot still held by the lost session's walsender", &pgconn.PgError{Code: "55006"}, true},
		{"a standby where the primary was expected", &pgconn.PgError{Code: "25006"}, true},
		{"wrong password", &pgconn.PgError{Code: "28P01"}, false},
		{"no such database", &pgconn.PgError{Code: "3D000"}, false},
		{"syntax error", &pgconn.PgError{Code: "42601"}, false},
		{"invalidated slot", fmt.Errorf("%w: wal_status=lost", ErrSlotInvalidated), false},
		{"a slot a failover lost, even over a broken connection", fmt.Errorf("%w: %w", ErrSlotInvalidated, io.EOF), false},
		{"kafka", errors.New("kafka did not accept a record: broker down"), false},
		{"cancelled", context.Canceled, false},
	} {
		if got := connectionLost(tc.err); got != tc.want {
			t.Errorf("%s: connectionLost(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}

func TestCheckFailover(t *testing.T) {
	for _, tc := range []struct {
		name     string
		failover bool
		site     site
		wantErr  string
	}{
		{"off, any server", false, site{version: 130000, standby: true}, ""},
		{"primary 17", true, site{version: 170000}, ""},
		{"primary 18", true, site{version: 180001}, ""},
		{"primary 16", true, site{version: 160004}, "PostgreSQL 17 or later (the server runs 16)"},
		{"standby 17", true, site{version: 170002, standby: true}, "failover slots are created on the primary"},
	} {
		cfg := config{failover: tc.failover}
		err := cfg.checkFailover(&tc.site)
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%s: got %v, want an error with %q", tc.name, err, tc.wantErr)
		}
	}
}

func TestReconnecting(t *testing.T) {
	lost := fmt.Errorf("receive from PostgreSQL: %w", io.ErrUnexpectedEOF)
	fatal := errors.New("publication has no tables")
	for _, tc := range []struct {
		name      string
		reconnect time.Duration
		results   []error // of successive runs; the last repeats
		wantRuns  int
		wantErr   error
		wantText  string
	}{
		{"off: the first loss ends Run", 0, []error{lost}, 1, lost, ""},
		{"reconnects until a run ends otherwise", time.Minute, []error{lost, lost, nil}, 3, nil, ""},
		{"a failure that is not a lost connection ends Run", time.Minute, []error{lost, fatal}, 2, fatal, ""},
		{"gives up after the timeout", 300 * time.Millisecond, []error{lost}, 0, lost, "the reconnect timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &Capturer{cfg: config{reconnect: tc.reconnect}, log: slog.New(slog.DiscardHandler)}
			runs := 0
			err := c.reconnecting(context.Background(), func(context.Context) error {
				err := tc.results[min(runs, len(tc.results)-1)]
				runs++
				return err
			})
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil && err != nil) {
				t.Errorf("err = %v, want %v", err, tc.wantErr)
			}
			if tc.wantText != "" && (err == nil || !strings.Contains(err.Error(), tc.wantText)) {
				t.Errorf("err = %v, want it to mention %q", err, tc.wantText)
			}
			if tc.wantRuns != 0 && runs != tc.wantRuns {
				t.Errorf("ran %d times, want %d", runs, tc.wantRuns)
			}
		})
	}
}
