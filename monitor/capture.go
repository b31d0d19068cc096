package monitor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/walhouse/walhouse/internal/redact"
	"github.com/walhouse/walhouse/record"
)

// CaptureLag is what a Probe read from one capture process.
type CaptureLag struct {
	// URL is the status URL serve read.
	URL string `json:"url"`
	// Up is false when the status could not be read; Error says why.
	Up     bool                  `json:"up"`
	Error  string                `json:"error,omitempty"`
	Status *record.CaptureStatus `json:"status,omitempty"`
}

// DefaultCaptureTimeout bounds one read of a capture status: /v1/lag and
// /metrics must answer promptly even when a capture process hangs.
const DefaultCaptureTimeout = 2 * time.Second

// maxCaptureStatus bounds a capture status document; a real one is a few
// hundred bytes.
const maxCaptureStatus = 64 << 10

// CaptureStatusURL turns what an operator passes to `walhouse serve
// --capture-url` into the URL of capture's status document: capture's
// --metrics-addr ("127.0.0.1:9465"), its base URL ("http://host:9465") or
// the full URL ("http://host:9465/status"). Only http and https are
// accepted.
func CaptureStatusURL(s string) (string, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return "", errors.New("empty capture URL: pass capture's --metrics-addr, e.g. 127.0.0.1:9465")
	}
	if !strings.Contains(s, "://") {
		s = "http://" + s
	}
	u, err := url.Parse(s)
	if err != nil {
		return "", fmt.Errorf("capture URL %q: %w; pass capture's --metrics-addr, e.g. 127.0.0.1:9465", s, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", fmt.Errorf("capture URL %q: scheme %q; use http or https", s, u.Scheme)
	}
	if u.Host == "" {
		return "", fmt.Errorf("capture URL %q has no host; pass capture's --metrics-addr, e.g. 127.0.0.1:9465", s)
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = "/status"
	}
	u.Fragment = ""
	return u.String(), nil
}

// captureProbe reads capture status documents.
type captureProbe struct {
	urls    []string
	client  *http.Client
	timeout time.Duration
}

// probe reads every capture's status concurrently, each bounded by the
// probe's timeout. A capture that cannot be read is reported down with the
// reason; it never fails the whole report.
func (c *captureProbe) probe(ctx context.Context) []CaptureLag {
	out := make([]CaptureLag, len(c.urls))
	var wg sync.WaitGroup
	for i, u := range c.urls {
		wg.Go(func() {
			// The URL may carry a password (a capture behind an
			// authenticating proxy): it is used, never shown.
			out[i] = CaptureLag{URL: redact.String(u)}
			st, err := c.fetch(ctx, u)
			if err != nil {
				out[i].Error = redact.String(err.Error())
				return
			}
			out[i].Up, out[i].Status = true, st
		})
	}
	wg.Wait()
	return out
}

func (c *captureProbe) fetch(ctx context.Context, u string) (*record.CaptureStatus, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("unreachable: %w (is `walhouse capture --metrics-addr` running there?)", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxCaptureStatus+1))
	if err != nil {
		return nil, fmt.Errorf("read the status: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("HTTP %d (%.200s); is this capture's --metrics-addr, and capture recent enough to serve /status?", resp.StatusCode, body)
	}
	if len(body) > maxCaptureStatus {
		return nil, fmt.Errorf("the status is larger than %d bytes; is this capture's --metrics-addr?", maxCaptureStatus)
	}
	var st record.CaptureStatus
	if err := json.Unmarshal(body, &st); err != nil {
		return nil, fmt.Errorf("not a capture status document: %w", err)
	}
	return &st, nil
}
