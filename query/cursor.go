package query

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"time"
)

// ErrInvalidCursor is returned for a cursor that is malformed, expired,
// signed with another key, or minted for another tenant, table or request.
// The caller is not told which, so cursors reveal nothing.
var ErrInvalidCursor = errors.New("invalid cursor: it is expired or belongs to another request; repeat the request without a cursor")

// Cursors mints and verifies opaque pagination cursors: an offset bound to
// the tenant, the table and the request's shape, signed with HMAC-SHA256.
// It is safe for concurrent use.
type Cursors struct {
	key []byte
	ttl time.Duration
	now func() time.Time
}

// NewCursors returns Cursors signing with secret; cursors expire after ttl
// (0 means 24 h).
func NewCursors(secret []byte, ttl time.Duration) *Cursors {
	if ttl <= 0 {
		ttl = 24 * time.Hour
	}
	return &Cursors{key: append([]byte(nil), secret...), ttl: ttl, now: time.Now}
}

// cursorState is what a cursor carries. Tenant and table are included so
// that a cursor is bound to them even if two requests have the same shape.
type cursorState struct {
	Tenant  string `json:"t"`
	Table   string `json:"tb"`
	Shape   string `json:"s"`
	Offset  int    `json:"o"`
	Expires int64  `json:"e"`
}

// Mint returns the cursor of the page that starts at offset.
func (c *Cursors) Mint(tenant, table string, req Request, offset int) string {
	st := cursorState{Tenant: tenant, Table: table, Shape: req.shapeHash(), Offset: offset, Expires: c.now().Add(c.ttl).Unix()}
	payload, _ := json.Marshal(st) // strings and ints always marshal
	enc := base64.RawURLEncoding
	return enc.EncodeToString(payload) + "." + enc.EncodeToString(c.sign(payload))
}

// Verify returns the offset a cursor stands for, or ErrInvalidCursor.
func (c *Cursors) Verify(cursor, tenant, table string, req Request) (int, error) {
	enc := base64.RawURLEncoding
	p, s, ok := strings.Cut(cursor, ".")
	if !ok {
		return 0, ErrInvalidCursor
	}
	payload, err1 := enc.DecodeString(p)
	sig, err2 := enc.DecodeString(s)
	if err1 != nil || err2 != nil || !hmac.Equal(sig, c.sign(payload)) {
		return 0, ErrInvalidCursor
	}
	var st cursorState
	if err := json.Unmarshal(payload, &st); err != nil {
		return 0, ErrInvalidCursor
	}
	if st.Tenant != tenant || st.Table != table || st.Shape != req.shapeHash() || st.Offset < 0 || c.now().Unix() > st.Expires {
		return 0, ErrInvalidCursor
	}
	return st.Offset, nil
}

func (c *Cursors) sign(payload []byte) []byte {
	m := hmac.New(sha256.New, c.key)
	m.Write([]byte("walhouse-cursor-v1\x00"))
	m.Write(payload)
	return m.Sum(nil)
}
