package query

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// encodingJSON is what writeJSONString must write: encoding/json's string
// without HTML escaping.
func encodingJSON(s string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	return strings.TrimSuffix(b.String(), "\n")
}

func TestWriteJSONString(t *testing.T) {
	for _, s := range []string{
		"", "plain", `<script>&amp;</script>`, "quote \" back \\ slash", "\b\f\n\r\t\x00\x01\x1f\x7f",
		"ünïcödé ✓ 🙂", "\u2028\u2029", "bad \xff\xfe utf-8 \xe2\x82", strings.Repeat("<", 1000),
	} {
		var b bytes.Buffer
		if err := writeJSONString(&b, s); err != nil {
			t.Fatal(err)
		}
		if want := encodingJSON(s); b.String() != want {
			t.Errorf("writeJSONString(%q) = %s, want %s", s, b.String(), want)
		}
	}
	var b bytes.Buffer
	_ = writeJSONString(&b, "<>&")
	if b.String() != `"<>&"` {
		t.Errorf("'<>&' written as %s: HTML-escaped", b.String())
	}
}

// TestWriteJSONValue: every value a row holds is written as encoding/json
// writes it without HTML escaping, the scalars by their fast path.
func TestWriteJSONValue(t *testing.T) {
	for _, v := range []any{
		nil, true, false, int8(-8), int16(-16), int32(-32), int64(-1 << 62), uint8(8), uint16(16), uint32(32), uint64(1 << 63),
		1.5, "a<b", []string{"<", "&"}, map[string]any{"k>": []int64{1, 2}}, []byte("raw"),
	} {
		var b bytes.Buffer
		if err := writeJSONValue(&b, v); err != nil {
			t.Fatal(err)
		}
		var want bytes.Buffer
		enc := json.NewEncoder(&want)
		enc.SetEscapeHTML(false)
		_ = enc.Encode(v)
		if b.String() != strings.TrimSuffix(want.String(), "\n") {
			t.Errorf("writeJSONValue(%#v) = %s, want %s", v, b.String(), want.String())
		}
	}
}

func FuzzWriteJSONString(f *testing.F) {
	for _, s := range []string{"", "<a href='x'>&</a>", "\x00\u2028\xff", "ü🙂"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var b bytes.Buffer
		if err := writeJSONString(&b, s); err != nil {
			t.Fatal(err)
		}
		if want := encodingJSON(s); b.String() != want {
			t.Fatalf("writeJSONString(%q) = %s, want %s", s, b.String(), want)
		}
	})
}

// TestPageWriter: a page within pageCommitBytes is held (its status still
// open), a larger one is sent in pieces, and a write that would pass the
// byte limit is refused before it is buffered.
func TestPageWriter(t *testing.T) {
	ok := func(h http.Header) { h.Set("Content-Type", "application/json") }

	rec := httptest.NewRecorder()
	pw := newPageWriter(rec, 1<<20, ok)
	_, _ = pw.WriteString(strings.Repeat("a", pageCommitBytes-1))
	if pw.committed || rec.Body.Len() != 0 {
		t.Fatalf("a page under pageCommitBytes was sent (%d bytes) before its end", rec.Body.Len())
	}
	if err := pw.finish(); err != nil || rec.Code != 200 || rec.Body.Len() != pageCommitBytes-1 || rec.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("finish: %v, status %d, %d bytes, headers %v", err, rec.Code, rec.Body.Len(), rec.Header())
	}

	rec = httptest.NewRecorder()
	pw = newPageWriter(rec, 1<<20, ok)
	big := strings.Repeat("b", 3*pageCommitBytes+5)
	if n, err := pw.WriteString(big); err != nil || n != len(big) {
		t.Fatalf("WriteString: %d, %v", n, err)
	}
	if !pw.committed || rec.Body.Len() != 3*pageCommitBytes || cap(pw.buf) != pageCommitBytes {
		t.Fatalf("a large page: committed %v, %d bytes sent, buffer of %d; want it streamed through one pageCommitBytes buffer", pw.committed, rec.Body.Len(), cap(pw.buf))
	}
	if _, err := pw.Write(make([]byte, 1<<20)); !errors.Is(err, errPageTooLarge) {
		t.Fatalf("a write past the limit: %v, want errPageTooLarge", err)
	}
	if len(pw.buf) != 5 || pw.n != int64(len(big)) {
		t.Errorf("the refused write was taken: %d buffered, %d counted", len(pw.buf), pw.n)
	}
	if _, err := pw.WriteString("x"); !errors.Is(err, errPageTooLarge) {
		t.Errorf("a write after the refusal: %v, want errPageTooLarge again", err)
	}
}

// TestFailPageCutsOffWhenTheCallerSeemsGone: a read that fails mid-page
// once its request's context ended (a caller that hung up, or only
// half-closed, which net/http takes the same way) is cut off
// (http.ErrAbortHandler), never ended as a well-formed chunked body that a
// caller still reading could take for the whole page.
func TestFailPageCutsOffWhenTheCallerSeemsGone(t *testing.T) {
	rec := httptest.NewRecorder()
	pw := newPageWriter(rec, 1<<20, func(http.Header) {})
	_, _ = pw.WriteString(`{"data":[` + strings.Repeat("a", pageCommitBytes))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r := httptest.NewRequest(http.MethodPost, "/v1/query", nil).WithContext(ctx)
	defer func() {
		if p := recover(); p != http.ErrAbortHandler {
			t.Errorf("failPage after the caller's context ended: recovered %v, want http.ErrAbortHandler", p)
		}
	}()
	(&Server{}).failPage(rec, r, pw, context.Canceled)
}
