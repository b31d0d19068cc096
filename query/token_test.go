package query

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/walhouse/walhouse/idempotency"
)

func TestParseTokenRead(t *testing.T) {
	src := idempotency.Token{SystemID: 77, Database: 5}
	s := &Server{cfg: Config{TokenSource: src, DefaultTokenWait: 5 * time.Second, MaxTokenWait: 30 * time.Second}}
	tok := func(lsn uint64) string { return idempotency.Token{SystemID: 77, Database: 5, LSN: lsn}.String() }
	for _, tc := range []struct {
		name   string
		tr     TokenRead
		header []string
		noSrc  bool
		want   tokenWait
		code   string // apiError code, or "bad_request" for a RequestError
	}{
		{name: "none", want: tokenWait{onStale: StaleAnswer}},
		{name: "body token, default wait", tr: TokenRead{Tokens: []string{tok(100)}}, want: tokenWait{lsn: 100, wait: 5 * time.Second, onStale: StaleAnswer}},
		{name: "newest of body and headers", tr: TokenRead{Tokens: []string{tok(100)}, Wait: "2s", OnStale: StaleFail}, header: []string{tok(300) + ", " + tok(200), tok(50)},
			want: tokenWait{lsn: 300, wait: 2 * time.Second, onStale: StaleFail}},
		{name: "wait capped", tr: TokenRead{Tokens: []string{tok(1)}, Wait: "10m"}, want: tokenWait{lsn: 1, wait: 30 * time.Second, onStale: StaleAnswer}},
		{name: "zero wait", tr: TokenRead{Tokens: []string{tok(1)}, Wait: "0s"}, want: tokenWait{lsn: 1, onStale: StaleAnswer}},
		{name: "foreign database", tr: TokenRead{Tokens: []string{idempotency.Token{SystemID: 77, Database: 6, LSN: 1}.String()}}, code: "foreign_token"},
		{name: "foreign cluster", header: []string{idempotency.Token{SystemID: 78, Database: 5, LSN: 1}.String()}, code: "foreign_token"},
		{name: "malformed", tr: TokenRead{Tokens: []string{"wh1.77.5"}}, code: "bad_request"},
		{name: "bad wait", tr: TokenRead{Tokens: []string{tok(1)}, Wait: "soon"}, code: "bad_request"},
		{name: "negative wait", tr: TokenRead{Tokens: []string{tok(1)}, Wait: "-1s"}, code: "bad_request"},
		{name: "bad onStale", tr: TokenRead{Tokens: []string{tok(1)}, OnStale: "retry"}, code: "bad_request"},
		{name: "wait without token", tr: TokenRead{Wait: "1s"}, code: "bad_request"},
		{name: "no source known", tr: TokenRead{Tokens: []string{tok(1)}}, noSrc: true, code: "tokens_unavailable"},
	} {
		r := httptest.NewRequest("POST", "/v1/tables/t/query", nil)
		for _, h := range tc.header {
			r.Header.Add(TokenHeader, h)
		}
		srv := s
		if tc.noSrc {
			srv = &Server{cfg: Config{DefaultTokenWait: time.Second, MaxTokenWait: time.Second}}
		}
		got, err := srv.parseTokenRead(r, tc.tr)
		if tc.code != "" {
			if ae := srv.classify(err); err == nil || ae.Code != tc.code || ae.Status != http.StatusBadRequest {
				t.Errorf("%s: %+v, %v; want 400 %s", tc.name, got, err, tc.code)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s: %+v, %v; want %+v", tc.name, got, err, tc.want)
		}
	}
}

// TestWatchersShareReads starts many waiters on one table: the watermark
// is read once per interval for all of them, every waiter returns once it
// passes their position, and waiters whose deadline passes first say so.
func TestWatchersShareReads(t *testing.T) {
	var reads atomic.Int64
	var lsn atomic.Uint64
	ws := newWatchers(func(ctx context.Context, table string) (SyncState, error) {
		reads.Add(1)
		l := LSN(lsn.Load())
		return SyncState{Table: table, LSN: &l}, nil
	}, time.Millisecond, nil)
	const waiters = 200
	var wg sync.WaitGroup
	errs := make(chan error, waiters)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for range waiters {
		wg.Go(func() {
			st, err := ws.await(ctx, "orders", 1000)
			if err == nil && (st.LSN == nil || *st.LSN < 1000) {
				err = fmt.Errorf("the wait ended with a sync state %+v that is not loaded through 1000", st)
			}
			errs <- err
		})
	}
	// Let the watcher read a while with nothing loaded, then load.
	for reads.Load() < 20 {
		time.Sleep(time.Millisecond)
	}
	lsn.Store(1000)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("a waiter: %v", err)
		}
	}
	// Far fewer reads than waiters × polls: one reader for all.
	if n := reads.Load(); n > 20+waiters {
		t.Errorf("%d reads for %d waiters: want one per interval, shared", n, waiters)
	}
	if _, ok := ws.loaded("orders", 1000); !ok && reads.Load() == 0 {
		t.Error("no read")
	}

	short, cancelShort := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancelShort()
	if _, err := ws.await(short, "orders", 2000); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a wait for a position never loaded: %v, want its deadline", err)
	}
}

// TestTokenWaitOf reads back what timing writes, also among other
// metrics, and nothing from anything else.
func TestTokenWaitOf(t *testing.T) {
	for header, want := range map[string]time.Duration{
		timing(412500 * time.Microsecond):  412500 * time.Microsecond,
		timing(0):                          0,
		"cache;dur=3, token-wait;dur=1000": time.Second,
		"token-wait;dur=1000, db;dur=3":    time.Second,
		"":                                 -1,
		"token-wait;dur=x":                 -1,
		"token-wait;dur=-5":                -1,
		"other;dur=5":                      -1,
	} {
		got, ok := TokenWaitOf(header)
		if want < 0 && ok || want >= 0 && (!ok || got != want) {
			t.Errorf("TokenWaitOf(%q) = %v, %v; want %v", header, got, ok, want)
		}
	}
}
