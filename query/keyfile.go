package query

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// KeyLookup finds the API key a caller presents. *Keys (a fixed set) and
// *KeyFile (a keys file re-read while the server runs) satisfy it.
type KeyLookup interface {
	Lookup(secret string) (Key, bool)
}

var (
	_ KeyLookup = (*Keys)(nil)
	_ KeyLookup = (*KeyFile)(nil)
)

// DefaultKeysReload is how often KeyFile.Run looks for a changed keys file
// by default.
const DefaultKeysReload = 10 * time.Second

// KeyFile is a keys file (LoadKeys) that is read again while the server
// runs, so that keys are added and revoked without a restart: Run reads it
// every interval and swaps the keys in when its content changed, and
// Reload (walhouse serve calls it on SIGHUP) reads it at once. A file that
// cannot be read or parsed leaves the keys in force unchanged, and is
// logged and counted (walhouse_api_keys_reload_failures_total): a
// half-written file never locks every caller out. It is safe for
// concurrent use, and is a prometheus.Collector of its two metrics.
type KeyFile struct {
	path string
	log  *slog.Logger
	keys atomic.Pointer[Keys]

	mu       sync.Mutex // serializes reads of the file
	sum      [sha256.Size]byte
	failures atomic.Uint64
	loadedAt atomic.Int64 // unix seconds of the last successful read

	descFailures, descLoaded, descCount *prometheus.Desc
}

// OpenKeyFile reads the keys file at path; it fails as LoadKeys does, so a
// server never starts without valid keys. Nil log means slog.Default().
func OpenKeyFile(path string, log *slog.Logger) (*KeyFile, error) {
	if log == nil {
		log = slog.Default()
	}
	f := &KeyFile{
		path:         path,
		log:          log.With("component", "query", "keys_file", path),
		descFailures: prometheus.NewDesc("walhouse_api_keys_reload_failures_total", "Reads of the API keys file that failed (unreadable or invalid) and left the keys in force unchanged.", nil, nil),
		descLoaded:   prometheus.NewDesc("walhouse_api_keys_loaded_timestamp_seconds", "When the API keys in force were read from the keys file.", nil, nil),
		descCount:    prometheus.NewDesc("walhouse_api_keys", "API keys in force.", nil, nil),
	}
	if _, err := f.Reload(); err != nil {
		return nil, err
	}
	return f, nil
}

// Lookup returns the key whose hash matches the presented secret, among
// the keys last read.
func (f *KeyFile) Lookup(secret string) (Key, bool) { return f.keys.Load().Lookup(secret) }

// Reload reads the keys file and puts its keys in force if its content
// changed; changed says whether it did. On an error the keys in force stay
// as they were.
func (f *KeyFile) Reload() (changed bool, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	first := f.keys.Load() == nil
	data, err := os.ReadFile(f.path)
	switch {
	case err != nil && first:
		return false, fmt.Errorf("read the API keys file: %w; create it with entries printed by `walhouse serve --new-key`", err)
	case err != nil:
		return false, f.failed(fmt.Errorf("read the API keys file: %w; the keys in force are unchanged", err))
	}
	sum := sha256.Sum256(data)
	if sum == f.sum {
		return false, nil
	}
	k, err := ParseKeys(data)
	switch {
	case err != nil && first: // no keys in force to keep: serve must not start
		return false, fmt.Errorf("API keys file %s: %w", f.path, err)
	case err != nil:
		return false, f.failed(fmt.Errorf("API keys file %s: %w; the keys in force are unchanged", f.path, err))
	}
	f.keys.Store(k)
	f.sum = sum
	f.loadedAt.Store(time.Now().Unix())
	if !first {
		f.log.Info("API keys reloaded", "keys", len(k.byHash))
	}
	return true, nil
}

func (f *KeyFile) failed(err error) error {
	f.failures.Add(1)
	f.log.Error("API keys file not reloaded", "err", err)
	return err
}

// Run reloads the keys file every interval (0: never by time) and
// whenever hup receives (nil: never), until ctx ends; it returns nil then.
func (f *KeyFile) Run(ctx context.Context, interval time.Duration, hup <-chan os.Signal) error {
	var tick <-chan time.Time
	if interval > 0 {
		t := time.NewTicker(interval)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick:
		case <-hup:
		}
		_, _ = f.Reload() // a failure is logged and counted; the old keys stay
	}
}

// Describe implements prometheus.Collector.
func (f *KeyFile) Describe(ch chan<- *prometheus.Desc) {
	ch <- f.descFailures
	ch <- f.descLoaded
	ch <- f.descCount
}

// Collect implements prometheus.Collector.
func (f *KeyFile) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(f.descFailures, prometheus.CounterValue, float64(f.failures.Load()))
	ch <- prometheus.MustNewConstMetric(f.descLoaded, prometheus.GaugeValue, float64(f.loadedAt.Load()))
	ch <- prometheus.MustNewConstMetric(f.descCount, prometheus.GaugeValue, float64(len(f.keys.Load().byHash)))
}

// errNoKeys is NewServer's complaint when Config.Keys is missing.
var errNoKeys = errors.New("query: Config.Keys is nil; load a keys file with OpenKeyFile or LoadKeys (--keys)")
