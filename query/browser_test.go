package query

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"image/png"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/walhouse/walhouse/clickhouse"
	"github.com/walhouse/walhouse/harness/testenv"
	"github.com/walhouse/walhouse/monitor"
	"github.com/walhouse/walhouse/schema"
)

// chromiumPath is where Debian's chromium package installs the browser
// (`apt-get install -y chromium`).
const chromiumPath = "/usr/bin/chromium"

var screenshotDir = flag.String("screenshot-dir", "", "directory for the status page screenshots of TestIntegrationStatusPageRenders (default: the test's temporary directory, removed afterwards)")

// requireChromium skips t when Debian's headless Chromium is not
// installed, unless WALHOUSE_INTEGRATION=1 and WALHOUSE_BROWSER=1 say the
// browser tests must run: then its absence fails t.
func requireChromium(t *testing.T) string {
	t.Helper()
	if _, err := os.Stat(chromiumPath); err != nil {
		msg := fmt.Sprintf("%s is not installed (%v): `apt-get install -y chromium` provides it", chromiumPath, err)
		if testenv.Required() && os.Getenv("WALHOUSE_BROWSER") == "1" {
			t.Fatal(msg + "; WALHOUSE_INTEGRATION=1 and WALHOUSE_BROWSER=1 require the browser tests")
		}
		t.Skip(msg + "; set WALHOUSE_INTEGRATION=1 WALHOUSE_BROWSER=1 to make this a failure")
	}
	return chromiumPath
}

// TestIntegrationStatusPageRenders opens /status in headless Chromium,
// enters the admin key in the page's form as an operator would, and checks
// that the freshness table and its charts render, start with the lag
// history serve sampled before the page opened, and follow the sink's
// progress as _walhouse_sync advances while the page stays open. Then it
// opens /status#key=… in a new tab: the page takes the key from the
// fragment, removes it from the address bar and draws the same history.
func TestIntegrationStatusPageRenders(t *testing.T) {
	bin := requireChromium(t)
	f := newCHFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// The sink's progress for orders: two partitions, the table's
	// lastSyncAt is the older one's loaded_through.
	base := time.Now().UTC().Truncate(time.Microsecond)
	steps := []struct {
		lag time.Duration // of the first partition behind base
		lsn LSN
	}{
		{lag: 45 * time.Second, lsn: 0x16B3748},
		{lag: 20 * time.Second, lsn: 0x16C0000},
		{lag: 0, lsn: 0x1700000},
	}
	recordLag := func(lag time.Duration, lsn LSN) time.Time {
		t.Helper()
		through := base.Add(-lag)
		now := time.Now().UTC()
		f.exec(t, fmt.Sprintf(`INSERT INTO %s.%s (source_table, partition, loaded_through, lsn, updated_at, partitions) VALUES
			('orders', 0, %s, %d, %s, 2), ('orders', 1, %s, %d, %s, 2)`,
			schema.QuoteIdent(f.db), schema.QuoteIdent(SyncTable),
			chTime(through), uint64(lsn), chTime(now),
			chTime(through.Add(time.Second)), uint64(lsn)+0x100, chTime(now)))
		return through
	}
	record := func(i int) time.Time { return recordLag(steps[i].lag, steps[i].lsn) }

	// Before the page opens, serve samples the lag while orders is five
	// minutes behind: more than any step below, so only a page that draws
	// the history shows it.
	const pastLag = 5 * time.Minute
	recordLag(pastLag, 0x1600000)
	const pastSamples = 3
	runHistory(ctx, t, f.api, func(h monitor.LagHistory) error {
		n := 0
		for _, s := range h.Samples {
			if fr := s.Tables["orders"].FreshnessSeconds; fr != nil && *fr >= pastLag.Seconds() {
				n++
			}
		}
		if n < pastSamples {
			return fmt.Errorf("%d samples with orders %v behind, want %d", n, pastLag, pastSamples)
		}
		return nil
	})

	b := startBrowser(ctx, t, bin)
	page, err := b.open(ctx, f.srv.URL+"/status")
	if err != nil {
		t.Fatal(err)
	}
	// Before a key is entered the page asks for one and reads nothing.
	first, err := page.waitState(ctx, func(s statusState) error {
		if !strings.Contains(s.Err, "admin scope") {
			return fmt.Errorf("no prompt for an admin key yet (error line %q)", s.Err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(first.Rows) != 0 {
		t.Errorf("without a key the page shows %d tables, want none", len(first.Rows))
	}

	if err := page.submitKey(ctx, keyAdmin); err != nil {
		t.Fatal(err)
	}
	var captures []statusState
	for i := range steps {
		through := record(i)
		want := through.Format(time.RFC3339Nano)
		s, err := page.waitState(ctx, func(s statusState) error {
			if s.Err != "" {
				return fmt.Errorf("the page shows the error %q", s.Err)
			}
			o, ok := s.row("orders")
			if !ok {
				return fmt.Errorf("no row for orders in %+v", s.Rows)
			}
			if o.LastSyncAt != want {
				return fmt.Errorf("orders shows lastSyncAt %q, want %q", o.LastSyncAt, want)
			}
			if i > 0 && o.Points == captures[i-1].mustRow("orders").Points {
				return errors.New("the orders chart has not moved since the last capture")
			}
			return nil
		})
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		captures = append(captures, s)
		path := page.checkScreenshot(ctx, t, fmt.Sprintf("status-%d.png", i+1))
		t.Logf("step %d: orders %+v; screenshot %s", i+1, s.mustRow("orders"), path)
	}

	// The first capture already holds the history: its chart's maximum is
	// the five minutes sampled before the page opened, and it has more
	// points than the page's own polls could have made by then.
	o := captures[0].mustRow("orders")
	if peak, err := parseFreshness(strings.TrimPrefix(o.Label, "max ")); err != nil || peak < pastLag.Seconds() {
		t.Errorf("the first chart's label is %q, want the history's maximum of at least %v: the history is not drawn (%v)", o.Label, pastLag, err)
	}
	if n := len(strings.Fields(o.Points)); n < pastSamples+1 {
		t.Errorf("the first chart has %d points, want the %d history samples and the first poll", n, pastSamples)
	}
	if st, ok := captures[0].stage("clickhouse"); !ok || !strings.HasPrefix(st.Value, "worst freshness ") || st.Points == "" {
		t.Errorf("the ClickHouse stage shows %+v (present %v), want its worst freshness and a chart", st, ok)
	}
	if st, ok := captures[0].stage("capture"); !ok || st.Value != "not configured" {
		t.Errorf("the capture stage of a server without --capture-url shows %+v (present %v)", st, ok)
	}

	// Every capture: both tables listed, orders with its numbers and a
	// chart, the other table marked as not recorded.
	for i, s := range captures {
		o := s.mustRow("orders")
		if o.LSN != steps[i].lsn.String() {
			t.Errorf("capture %d: orders lsn %q, want %q", i+1, o.LSN, steps[i].lsn)
		}
		if o.Partitions != "2" {
			t.Errorf("capture %d: orders partitions %q, want 2", i+1, o.Partitions)
		}
		fresh, err := parseFreshness(o.Freshness)
		if err != nil {
			t.Errorf("capture %d: orders freshness: %v", i+1, err)
		} else if lag := steps[i].lag.Seconds(); fresh < lag || fresh > lag+60 {
			t.Errorf("capture %d: orders freshness %q, want at least %.0f s and not a minute more", i+1, o.Freshness, lag)
		}
		if o.Points == "" || !strings.HasPrefix(o.Label, "max ") {
			t.Errorf("capture %d: orders has no chart (polyline %q, label %q)", i+1, o.Points, o.Label)
		}
		odd, ok := s.row("crm__odd names")
		if !ok || odd.LastSyncAt != "not recorded yet" || odd.Freshness != "unknown" {
			t.Errorf("capture %d: crm__odd names shows %+v, want lastSyncAt not recorded and freshness unknown", i+1, odd)
		}
		if s.Now == "" {
			t.Errorf("capture %d: no \"as of\" line", i+1)
		}
	}
	// The numbers follow the sink, and the chart keeps its history.
	for i := 1; i < len(captures); i++ {
		prev, cur := captures[i-1].mustRow("orders"), captures[i].mustRow("orders")
		if cur.Freshness == prev.Freshness || cur.LSN == prev.LSN {
			t.Errorf("capture %d did not change: freshness %q → %q, lsn %q → %q", i+1, prev.Freshness, cur.Freshness, prev.LSN, cur.LSN)
		}
		if n, m := len(strings.Fields(prev.Points)), len(strings.Fields(cur.Points)); m <= n {
			t.Errorf("capture %d: the chart has %d points, no more than the %d before", i+1, m, n)
		}
	}
	// Each freshness has the colour of its band (under 10 s ok, under a
	// minute warn, else bad). The band is checked against the value shown,
	// not the step's lag: on a loaded machine the page may show a step
	// seconds later than planned (the steps, 45 s, 20 s and 0 s behind,
	// usually give warn, warn, ok).
	for i, s := range captures {
		o := s.mustRow("orders")
		fresh, err := parseFreshness(o.Freshness)
		if err != nil {
			continue // reported above
		}
		want := "bad"
		switch {
		case fresh < 10:
			want = "ok"
		case fresh < 60:
			want = "warn"
		}
		if o.FreshnessClass != want {
			t.Errorf("capture %d: freshness %q shown as %q, want %q", i+1, o.Freshness, o.FreshnessClass, want)
		}
	}

	// A link with the key in its fragment, opened in a new tab (whose
	// sessionStorage is empty): no form to fill, the key leaves the address
	// bar, and the history is drawn there too.
	tab, err := b.open(ctx, f.srv.URL+"/status#key="+url.QueryEscape(keyAdmin))
	if err != nil {
		t.Fatal(err)
	}
	want := base.Add(-steps[len(steps)-1].lag).Format(time.RFC3339Nano)
	s, err := tab.waitState(ctx, func(s statusState) error {
		if s.Err != "" {
			return fmt.Errorf("the page shows the error %q", s.Err)
		}
		if o, ok := s.row("orders"); !ok || o.LastSyncAt != want {
			return fmt.Errorf("orders not shown as loaded through %s: %+v", want, s.Rows)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("status page opened with the key in its fragment: %v", err)
	}
	if strings.Contains(s.Href, "#") || strings.Contains(s.Href, keyAdmin) {
		t.Errorf("the address bar still holds the key: %s", s.Href)
	}
	if s.StoredKey != keyAdmin {
		t.Errorf("sessionStorage holds %q, want the key from the fragment", s.StoredKey)
	}
	o = s.mustRow("orders")
	if peak, err := parseFreshness(strings.TrimPrefix(o.Label, "max ")); err != nil || peak < pastLag.Seconds() {
		t.Errorf("opened with #key: the chart's label is %q, want the history's maximum of at least %v (%v)", o.Label, pastLag, err)
	}
	path := tab.checkScreenshot(ctx, t, "status-fragment-key.png")
	t.Logf("opened with #key: orders %+v; screenshot %s", o, path)
}

// runHistory runs api's lag sampler until done accepts its history.
func runHistory(ctx context.Context, t *testing.T, api *Server, done func(monitor.LagHistory) error) {
	t.Helper()
	hctx, stop := context.WithCancel(ctx)
	stopped := make(chan error, 1)
	go func() { stopped <- api.Run(hctx) }()
	err := testenv.Eventually(ctx, 30*time.Second, func(context.Context) error { return done(api.history.Snapshot()) })
	stop()
	if rerr := <-stopped; rerr != nil {
		t.Errorf("Run: %v", rerr)
	}
	if err != nil {
		t.Fatalf("lag history: %v", err)
	}
}

// checkScreenshot saves a screenshot of the page under name and checks
// that the charts are in it: enough pixels of the charts' line colour
// (#0969da), which nothing else on the page uses.
func (p *page) checkScreenshot(ctx context.Context, t *testing.T, name string) string {
	t.Helper()
	data, err := p.screenshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(shotDir(t), name)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("screenshot %s: %v", path, err)
	}
	line := 0
	bounds := img.Bounds()
	for y := bounds.Min.Y; y < bounds.Max.Y; y++ {
		for x := bounds.Min.X; x < bounds.Max.X; x++ {
			r, g, b, _ := img.At(x, y).RGBA()
			// Anti-aliasing blends the line with the background: accept
			// pixels clearly blue.
			if b>>8 > 150 && r>>8 < 110 && g>>8 < 160 {
				line++
			}
		}
	}
	// Two charts (orders and the ClickHouse stage), each a line at least
	// 20 pixels long; the page has none of that colour without them.
	if line < 40 {
		t.Errorf("screenshot %s has %d chart-line pixels, want at least 40: the charts did not render", path, line)
	}
	return path
}

// chTime is a ClickHouse DateTime64(6, 'UTC') literal.
func chTime(t time.Time) string {
	return "toDateTime64('" + t.UTC().Format("2006-01-02 15:04:05.000000") + "', 6, 'UTC')"
}

// parseFreshness reads the page's freshness text ("12.3 s", "4.5 min")
// in seconds.
func parseFreshness(s string) (float64, error) {
	num, unit, ok := strings.Cut(s, " ")
	if !ok {
		return 0, fmt.Errorf("%q is not a number and a unit", s)
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return 0, fmt.Errorf("%q: %w", s, err)
	}
	switch unit {
	case "s":
		return v, nil
	case "min":
		return v * 60, nil
	default:
		return 0, fmt.Errorf("%q has unit %q, want s or min", s, unit)
	}
}

func shotDir(t *testing.T) string {
	if *screenshotDir != "" {
		return *screenshotDir
	}
	return t.TempDir()
}

// statusState is what the status page shows, read from its DOM, and where
// it keeps the key.
type statusState struct {
	Err       string        `json:"err"`
	Now       string        `json:"now"`
	Rows      []statusRow   `json:"rows"`
	Stages    []statusStage `json:"stages"`
	Href      string        `json:"href"`
	StoredKey string        `json:"storedKey"`
}

// statusStage is one box of the page's pipeline strip.
type statusStage struct {
	Stage  string `json:"stage"`
	Value  string `json:"value"`
	Points string `json:"points"`
	// Class is the value's class (ok, bad…), Detail the line under it.
	Class  string `json:"class"`
	Detail string `json:"detail"`
}

func (s statusState) stage(id string) (statusStage, bool) {
	return first(s.Stages, func(st statusStage) bool { return st.Stage == id })
}

// first returns the first of xs for which match is true, and whether there
// is one.
func first[T any](xs []T, match func(T) bool) (T, bool) {
	if i := slices.IndexFunc(xs, match); i >= 0 {
		return xs[i], true
	}
	var zero T
	return zero, false
}

// statusRow is one table row of the status page.
type statusRow struct {
	Table          string `json:"table"`
	LastSyncAt     string `json:"lastSyncAt"`
	Freshness      string `json:"freshness"`
	FreshnessClass string `json:"freshnessClass"`
	LSN            string `json:"lsn"`
	Partitions     string `json:"partitions"`
	// Points is the chart's polyline, Label its "max …" text.
	Points string `json:"points"`
	Label  string `json:"label"`
	// Verify is the verify column, VerifyClass its colour.
	Verify      string `json:"verify"`
	VerifyClass string `json:"verifyClass"`
}

func (s statusState) row(table string) (statusRow, bool) {
	return first(s.Rows, func(r statusRow) bool { return r.Table == table })
}

func (s statusState) mustRow(table string) statusRow {
	r, _ := s.row(table)
	return r
}

// readStatusJS returns the page's state as JSON.
const readStatusJS = `JSON.stringify({
  err: document.getElementById("err").textContent,
  now: document.getElementById("now").textContent,
  rows: [...document.querySelectorAll("#tables tbody tr")].map(tr => {
    const td = tr.querySelectorAll("td");
    const line = tr.querySelector("svg polyline"), label = tr.querySelector("svg text");
    return {
      table: tr.dataset.table, lastSyncAt: td[1].textContent,
      freshness: td[2].textContent, freshnessClass: td[2].className,
      lsn: td[3].textContent, partitions: td[4].textContent,
      points: line ? line.getAttribute("points") : "", label: label ? label.textContent : "",
      verify: td[7] ? td[7].textContent : "", verifyClass: td[7] ? td[7].className : "",
    };
  }),
  stages: [...document.querySelectorAll("#stages .stage")].map(d => {
    const line = d.querySelector("svg polyline");
    const v = d.querySelector(".value"), detail = d.querySelector(".unknown");
    return { stage: d.dataset.stage, value: v.textContent, class: v.className, detail: detail ? detail.textContent : "",
      points: line ? line.getAttribute("points") : "" };
  }),
  href: location.href,
  storedKey: sessionStorage.getItem("walhouseKey") || "",
})`

// browser is headless Chromium driven over the DevTools protocol on a pipe
// (--remote-debugging-pipe: commands on its fd 3, replies on its fd 4, each
// message JSON ending in a NUL byte), so the test needs no client library
// and no port.
type browser struct {
	t       *testing.T
	cmd     *exec.Cmd
	toB     io.WriteCloser
	mu      sync.Mutex
	nextID  int64
	pending map[int64]chan cdpMessage
	readErr error
	done    chan struct{} // closed when the reader has stopped
}

// cdpMessage is a DevTools reply or event.
type cdpMessage struct {
	ID     int64           `json:"id"`
	Method string          `json:"method"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// startBrowser runs Chromium until the test ends.
func startBrowser(ctx context.Context, t *testing.T, bin string) *browser {
	t.Helper()
	cmdR, cmdW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd := exec.Command(bin,
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-dev-shm-usage", "--window-size=1200,900",
		"--user-data-dir="+t.TempDir(), "--remote-debugging-pipe", "about:blank")
	cmd.ExtraFiles = []*os.File{cmdR, outW} // fds 3 and 4 of the browser
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	cmdR.Close()
	outW.Close()
	b := &browser{t: t, cmd: cmd, toB: cmdW, pending: map[int64]chan cdpMessage{}, done: make(chan struct{})}
	go b.read(outR)
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = b.call(cctx, "", "Browser.close", nil, nil)
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		select {
		case <-exited:
		case <-cctx.Done():
			_ = cmd.Process.Kill()
			<-exited
		}
		cmdW.Close()
		<-b.done
		outR.Close()
		if t.Failed() {
			t.Logf("chromium output:\n%s", stderr.String())
		}
	})
	if err := b.call(ctx, "", "Browser.getVersion", nil, nil); err != nil {
		t.Fatalf("chromium does not answer on its DevTools pipe: %v\n%s", err, stderr.String())
	}
	return b
}

// read delivers replies to their callers until the browser closes its end.
func (b *browser) read(r io.Reader) {
	defer close(b.done)
	br := bufio.NewReader(r)
	var err error
	for {
		var line []byte
		if line, err = br.ReadBytes(0); err != nil {
			break
		}
		var m cdpMessage
		if err = json.Unmarshal(line[:len(line)-1], &m); err != nil {
			break
		}
		if m.ID == 0 {
			continue // an event
		}
		b.mu.Lock()
		ch := b.pending[m.ID]
		delete(b.pending, m.ID)
		b.mu.Unlock()
		if ch != nil {
			ch <- m
		}
	}
	b.mu.Lock()
	b.readErr = fmt.Errorf("the DevTools pipe closed: %w", err)
	for id, ch := range b.pending {
		close(ch)
		delete(b.pending, id)
	}
	b.mu.Unlock()
}

// call sends one DevTools command, to a page session or (session "") to
// the browser, waits for its result and decodes it into result (unless
// result is nil).
func (b *browser) call(ctx context.Context, session, method string, params, result any) error {
	res, err := b.send(ctx, session, method, params)
	if err != nil || result == nil {
		return err
	}
	if err := json.Unmarshal(res, result); err != nil {
		return fmt.Errorf("%s: decode the result: %w", method, err)
	}
	return nil
}

// send sends one DevTools command and returns its result undecoded.
func (b *browser) send(ctx context.Context, session, method string, params any) (json.RawMessage, error) {
	b.mu.Lock()
	if b.readErr != nil {
		b.mu.Unlock()
		return nil, fmt.Errorf("%s: %w", method, b.readErr)
	}
	b.nextID++
	id := b.nextID
	ch := make(chan cdpMessage, 1)
	b.pending[id] = ch
	b.mu.Unlock()
	msg := map[string]any{"id": id, "method": method}
	if params != nil {
		msg["params"] = params
	}
	if session != "" {
		msg["sessionId"] = session
	}
	data, err := json.Marshal(msg)
	if err != nil {
		return nil, err
	}
	if _, err := b.toB.Write(append(data, 0)); err != nil {
		return nil, fmt.Errorf("%s: write to the DevTools pipe: %w", method, err)
	}
	select {
	case m, ok := <-ch:
		if !ok {
			return nil, fmt.Errorf("%s: no reply: the DevTools pipe closed", method)
		}
		if m.Error != nil {
			return nil, fmt.Errorf("%s: DevTools error %d: %s", method, m.Error.Code, m.Error.Message)
		}
		return m.Result, nil
	case <-ctx.Done():
		b.mu.Lock()
		delete(b.pending, id)
		b.mu.Unlock()
		return nil, fmt.Errorf("%s: %w", method, ctx.Err())
	}
}

// page is one open tab.
type page struct {
	b       *browser
	session string
}

// open opens url in a new tab.
func (b *browser) open(ctx context.Context, url string) (*page, error) {
	var target struct {
		TargetID string `json:"targetId"`
	}
	if err := b.call(ctx, "", "Target.createTarget", map[string]any{"url": url}, &target); err != nil {
		return nil, err
	}
	var att struct {
		SessionID string `json:"sessionId"`
	}
	if err := b.call(ctx, "", "Target.attachToTarget", map[string]any{"targetId": target.TargetID, "flatten": true}, &att); err != nil {
		return nil, err
	}
	return &page{b: b, session: att.SessionID}, nil
}

// eval evaluates a JavaScript expression in the page and decodes its
// value into out.
func (p *page) eval(ctx context.Context, expr string, out any) error {
	var r struct {
		Result struct {
			Value json.RawMessage `json:"value"`
		} `json:"result"`
		ExceptionDetails *struct {
			Text      string `json:"text"`
			Exception struct {
				Description string `json:"description"`
			} `json:"exception"`
		} `json:"exceptionDetails"`
	}
	if err := p.b.call(ctx, p.session, "Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true, "awaitPromise": true}, &r); err != nil {
		return err
	}
	if e := r.ExceptionDetails; e != nil {
		return fmt.Errorf("script failed: %s %s", e.Text, e.Exception.Description)
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(r.Result.Value, out)
}

// waitState polls the page's DOM until check accepts it.
func (p *page) waitState(ctx context.Context, check func(statusState) error) (statusState, error) {
	var s statusState
	err := testenv.Eventually(ctx, 30*time.Second, func(ctx context.Context) error {
		var text string
		if err := p.eval(ctx, readStatusJS, &text); err != nil {
			return err
		}
		if err := json.Unmarshal([]byte(text), &s); err != nil {
			return fmt.Errorf("decode the page state %q: %w", text, err)
		}
		return check(s)
	})
	return s, err
}

// submitKey types secret into the page's key field and submits the form,
// as an operator does; the page keeps it in sessionStorage for its polls.
func (p *page) submitKey(ctx context.Context, secret string) error {
	lit, _ := json.Marshal(secret)
	return p.eval(ctx, `(() => {
  document.getElementById("key").value = `+string(lit)+`;
  document.querySelector("#auth button[type=submit]").click();
})()`, nil)
}

// screenshot returns a PNG of the page's viewport.
func (p *page) screenshot(ctx context.Context) ([]byte, error) {
	var shot struct {
		Data string `json:"data"`
	}
	if err := p.b.call(ctx, p.session, "Page.captureScreenshot", map[string]any{"format": "png"}, &shot); err != nil {
		return nil, err
	}
	return base64.StdEncoding.DecodeString(shot.Data)
}

// TestIntegrationStatusPageOddTableNames opens /status with tables named
// like the properties every JavaScript object has: the page keys its
// tables in Maps, so each gets its row and chart (as plain objects,
// "constructor" found Object's constructor and "__proto__" the prototype,
// and the page showed an error instead).
func TestIntegrationStatusPageOddTableNames(t *testing.T) {
	bin := requireChromium(t)
	f := newCHFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	names := []string{"constructor", "__proto__", "hasOwnProperty", "toString"}
	now := time.Now().UTC()
	for i, name := range names {
		f.exec(t, fmt.Sprintf("CREATE TABLE %s.%s (tenant_id String, id Int64, _version UInt64, _is_deleted UInt8, _commit_ts DateTime64(6, 'UTC'), _synced_at DateTime64(6, 'UTC') DEFAULT now64(6)) ENGINE = ReplacingMergeTree(_version, _is_deleted) ORDER BY (tenant_id, id)",
			schema.QuoteIdent(f.db), schema.QuoteIdent(name)))
		f.exec(t, fmt.Sprintf("INSERT INTO %s.%s (source_table, partition, loaded_through, lsn, updated_at, partitions) VALUES ('%s', 0, %s, %d, %s, 1)",
			schema.QuoteIdent(f.db), schema.QuoteIdent(SyncTable), name, chTime(now.Add(-time.Duration(i)*time.Second)), 100+i, chTime(now)))
	}
	b := startBrowser(ctx, t, bin)
	page, err := b.open(ctx, f.srv.URL+"/status#key="+url.QueryEscape(keyAdmin))
	if err != nil {
		t.Fatal(err)
	}
	// Two polls, so that each table's chart has been drawn from a series
	// the page keeps between polls.
	var polls []statusState
	for len(polls) < 2 {
		s, err := page.waitState(ctx, func(s statusState) error {
			if s.Err != "" {
				return fmt.Errorf("the page shows the error %q", s.Err)
			}
			if len(polls) > 0 && s.Now == polls[0].Now {
				return errors.New("no new poll yet")
			}
			for _, name := range names {
				r, ok := s.row(name)
				if !ok {
					return fmt.Errorf("no row for %q in %+v", name, s.Rows)
				}
				if r.LastSyncAt == "not recorded yet" || r.Points == "" {
					return fmt.Errorf("%q shows %+v, want its lastSyncAt and a chart", name, r)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatalf("poll %d: %v", len(polls)+1, err)
		}
		polls = append(polls, s)
	}
	for i, name := range names {
		if r := polls[1].mustRow(name); r.LSN != LSN(100+i).String() {
			t.Errorf("%q shows lsn %q, want %s", name, r.LSN, LSN(100+i))
		}
	}
}

// TestIntegrationStatusPageShowsVerify opens /status while `walhouse
// verify` records its rounds in ClickHouse (clickhouse.VerifyLog, as
// verify does): the page's verify stage sums them up and each table's row
// shows its last round, the tables that differ or failed in red, and
// GET /v1/lag carries the counts, never a key or a value.
func TestIntegrationStatusPageShowsVerify(t *testing.T) {
	bin := requireChromium(t)
	f := newCHFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	vlog := clickhouse.NewVerifyLog(f.conn, f.db)
	const odd = "crm__odd names"
	at := func(hour, minute int) time.Time { return time.Date(2026, 3, 1, hour, minute, 0, 0, time.UTC) }

	b := startBrowser(ctx, t, bin)
	page, err := b.open(ctx, f.srv.URL+"/status#key="+url.QueryEscape(keyAdmin))
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name   string
		rounds []clickhouse.VerifyRound
		check  func(statusState) error
	}{{
		name: "no round yet",
		check: func(s statusState) error {
			if st, ok := s.stage("verify"); !ok || st.Value != "no round recorded" {
				return fmt.Errorf("verify stage %+v (present %v), want no round recorded", st, ok)
			}
			if o, ok := s.row("orders"); !ok || o.Verify != "" {
				return fmt.Errorf("orders shows verify %q before any round", o.Verify)
			}
			return nil
		},
	}, {
		name: "orders equal, the other table differs",
		rounds: []clickhouse.VerifyRound{
			{Table: "orders", Outcome: schema.Verified, FinishedAt: at(9, 5), SnapshotLSN: 0x1700000, RowsChecked: 1000, ChangedSince: 2},
			{Table: odd, Outcome: schema.Verified, FinishedAt: at(9, 7), SnapshotLSN: 0x1700100, RowsChecked: 50, MismatchedRows: 3},
		},
		check: func(s statusState) error {
			return wantVerify(s, "verified 2 tables, last round 09:07 UTC, crm__odd names (3 rows) differ", "value bad", "",
				map[string][2]string{"orders": {"equal at 09:05 UTC, 1000 rows, 2 changed since", "ok"}, odd: {"3 rows differ at 09:07 UTC (see the report)", "bad"}})
		},
	}, {
		name: "the other table repaired, orders fails its next round",
		rounds: []clickhouse.VerifyRound{
			{Table: odd, Outcome: schema.Verified, FinishedAt: at(10, 7), SnapshotLSN: 0x1800000, RowsChecked: 50, RepairedRows: 3},
			{Table: "orders", Outcome: schema.VerifyFailed, FinishedAt: at(10, 8), Error: "not loaded through the snapshot"},
		},
		check: func(s statusState) error {
			return wantVerify(s, "verified 2 tables, last round 10:07 UTC, 0 differ", "value bad", "FAILED orders at 10:08 UTC: not loaded through the snapshot",
				map[string][2]string{"orders": {"FAILED at 10:08 UTC: not loaded through the snapshot", "bad"}, odd: {"equal at 10:07 UTC, 50 rows", "ok"}})
		},
	}, {
		name: "orders verified again",
		rounds: []clickhouse.VerifyRound{
			{Table: "orders", Outcome: schema.Verified, FinishedAt: at(11, 0), SnapshotLSN: 0x1900000, RowsChecked: 1001},
		},
		check: func(s statusState) error {
			return wantVerify(s, "verified 2 tables, last round 11:00 UTC, 0 differ", "value ok", "",
				map[string][2]string{"orders": {"equal at 11:00 UTC, 1001 rows", "ok"}, odd: {"equal at 10:07 UTC, 50 rows", "ok"}})
		},
	}}
	for i, st := range steps {
		if err := vlog.Record(ctx, st.rounds...); err != nil {
			t.Fatalf("step %d (%s): %v", i+1, st.name, err)
		}
		if _, err := page.waitState(ctx, func(s statusState) error {
			if s.Err != "" {
				return fmt.Errorf("the page shows the error %q", s.Err)
			}
			return st.check(s)
		}); err != nil {
			t.Fatalf("step %d (%s): %v", i+1, st.name, err)
		}
		if shot, err := page.screenshot(ctx); err == nil {
			path := filepath.Join(shotDir(t), fmt.Sprintf("status-verify-%d.png", i+1))
			t.Logf("step %d (%s): screenshot %s (%v)", i+1, st.name, path, os.WriteFile(path, shot, 0o644))
		}
	}

	// The status JSON the page reads: counts and positions per table.
	var rep LagReport
	f.call(t, "GET", "/v1/lag", keyAdmin, nil, &rep)
	for _, lt := range rep.Tables {
		if lt.Table == "orders" {
			v := lt.Verify
			if v == nil || v.RowsChecked != 1001 || v.SnapshotLSN == nil || *v.SnapshotLSN != 0x1900000 || v.FailedAt != nil || v.MismatchedRows != 0 {
				t.Errorf("GET /v1/lag: orders verify %+v, want 1001 rows at 0/1900000 and no failure", v)
			}
		}
	}
}

// wantVerify checks the page's verify stage (value, its class, detail) and
// each table's verify cell (text and class).
func wantVerify(s statusState, value, class, detail string, rows map[string][2]string) error {
	st, ok := s.stage("verify")
	if !ok || st.Value != value || st.Class != class || st.Detail != detail {
		return fmt.Errorf("verify stage %+v (present %v), want value %q, class %q, detail %q", st, ok, value, class, detail)
	}
	for table, want := range rows {
		r, ok := s.row(table)
		if !ok || r.Verify != want[0] || r.VerifyClass != want[1] {
			return fmt.Errorf("%s shows verify %q (%q), want %q (%q)", table, r.Verify, r.VerifyClass, want[0], want[1])
		}
	}
	return nil
}
