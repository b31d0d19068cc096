package idempotency

import (
	"errors"
	"fmt"
	"strings"

	"github.com/dunglas/httpsfv"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"
)

// Key identifies one logical write and every retry of it. It is a UUID;
// NewKey makes version 7 ones (RFC 9562: a millisecond timestamp, then
// random bits), which sort by time and so append to the key table's index
// instead of splitting its pages. The zero Key means "no key".
type Key [16]byte

// NewKey returns a fresh UUIDv7 key. Generate it once per logical write,
// before the first attempt, and send the same key with every retry.
func NewKey() Key {
	u, err := uuid.NewV7()
	if err != nil {
		// NewV7 fails only when the system's random source does, which
		// crypto/rand treats as fatal too.
		panic(fmt.Sprintf("idempotency: generate a UUIDv7 key: %v", err))
	}
	return Key(u)
}

// ErrMalformedKey is returned for a key that is not a UUID.
var ErrMalformedKey = errors.New("malformed idempotency key")

// ParseKey parses the text form of a key: a UUID in its canonical
// 8-4-4-4-12 hexadecimal form (any case). Other spellings that uuid.Parse
// accepts (braces, urn:uuid:, no hyphens) and the nil and max UUIDs are
// refused, so that one key has one spelling and a fingerprint cannot be
// dodged by re-spelling it.
func ParseKey(s string) (Key, error) {
	if len(s) != 36 {
		return Key{}, fmt.Errorf("%w %q: want a UUID such as 0190a6d5-3c1e-7b4a-9f00-5a1c2e3d4f60", ErrMalformedKey, truncate(s))
	}
	u, err := uuid.Parse(s)
	if err != nil {
		return Key{}, fmt.Errorf("%w %q: %v", ErrMalformedKey, truncate(s), err)
	}
	if u == uuid.Nil || u == uuid.Max {
		return Key{}, fmt.Errorf("%w %q: the nil and max UUIDs are not keys", ErrMalformedKey, s)
	}
	if u.Variant() != uuid.RFC4122 {
		return Key{}, fmt.Errorf("%w %q: not an RFC 9562 UUID (variant bits)", ErrMalformedKey, s)
	}
	return Key(u), nil
}

// ParseHeader parses the value of an Idempotency-Key request header. The
// IETF httpapi draft defines it as a Structured Field Item whose value is a
// String ("…" in double quotes); a bare UUID, as many clients send it, is
// accepted too. The string must be a key that ParseKey accepts.
func ParseHeader(values []string) (Key, error) {
	if len(values) != 1 {
		return Key{}, fmt.Errorf("%w: want one Idempotency-Key header, got %d", ErrMalformedKey, len(values))
	}
	v := strings.TrimSpace(values[0])
	if !strings.HasPrefix(v, `"`) {
		return ParseKey(v)
	}
	item, err := httpsfv.UnmarshalItem([]string{v})
	if err != nil {
		return Key{}, fmt.Errorf("%w %q: not a Structured Field string: %v", ErrMalformedKey, truncate(v), err)
	}
	s, ok := item.Value.(string)
	if !ok {
		return Key{}, fmt.Errorf("%w %q: want a string", ErrMalformedKey, truncate(v))
	}
	return ParseKey(s)
}

// Header returns k as the value of an Idempotency-Key header: a Structured
// Field String, as the draft defines it.
func (k Key) Header() string { return `"` + k.String() + `"` }

// String returns the canonical text form of k.
func (k Key) String() string { return uuid.UUID(k).String() }

// IsZero reports whether k is the zero Key, which stands for "no key".
func (k Key) IsZero() bool { return k == Key{} }

// UUIDValue lets pgx write k to a uuid column.
func (k Key) UUIDValue() (pgtype.UUID, error) { return pgtype.UUID{Bytes: k, Valid: !k.IsZero()}, nil }

// ScanUUID lets pgx read a uuid column into k.
func (k *Key) ScanUUID(v pgtype.UUID) error {
	if !v.Valid {
		return errors.New("idempotency: scan NULL into a Key")
	}
	*k = v.Bytes
	return nil
}

// truncate shortens untrusted text quoted in an error.
func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}
