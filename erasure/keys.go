package erasure

import (
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash"
)

// MinSecretBytes is the shortest erasure secret accepted.
const MinSecretBytes = 16

// Keys are what walhouse derives from the erasure secret: the key of the
// ledger's hashes and the ed25519 key that signs manifests. Every sink
// and every process that erases must hold the same secret (the ledger's
// rows record which key made them, KeyID). Keys is immutable and safe for
// concurrent use.
type Keys struct {
	hashKey []byte
	sign    ed25519.PrivateKey
	id      string
}

// NewKeys derives the keys from secret (at least MinSecretBytes bytes).
// Each key is an HMAC of the secret with its own label, so knowing one
// (say, the public key in a manifest) tells nothing of the others.
func NewKeys(secret []byte) (Keys, error) {
	if len(secret) < MinSecretBytes {
		return Keys{}, fmt.Errorf("the erasure key has %d bytes; use at least %d random bytes (e.g. head -c 32 /dev/urandom | base64)", len(secret), MinSecretBytes)
	}
	derive := func(label string) []byte {
		m := hmac.New(sha256.New, secret)
		m.Write([]byte(label))
		return m.Sum(nil)
	}
	return Keys{
		hashKey: derive("walhouse erasure ledger v1"),
		sign:    ed25519.NewKeyFromSeed(derive("walhouse erasure manifest v1")),
		id:      hex.EncodeToString(derive("walhouse erasure key id v1")[:8]),
	}, nil
}

// KeyID names the secret without revealing it: the ledger's rows carry it,
// so a sink given another secret notices instead of missing every entry.
func (k Keys) KeyID() string { return k.id }

// PublicKey is the key that verifies manifests (VerifyManifest).
func (k Keys) PublicKey() ed25519.PublicKey { return k.sign.Public().(ed25519.PublicKey) }

// Hash is a subject's ledger hash.
type Hash [sha256.Size]byte

// String returns the hash as hex, the ledger's form.
func (h Hash) String() string { return hex.EncodeToString(h[:]) }

// ParseHash parses the hex form of a Hash.
func ParseHash(s string) (Hash, error) {
	var h Hash
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != len(h) {
		return h, fmt.Errorf("ledger hash %q: want %d hex digits", s, 2*len(h))
	}
	copy(h[:], b)
	return h, nil
}

// Subject is what a ledger entry is a hash of: one subject of one tenant
// in one source table, by the PostgreSQL text of its column's value.
type Subject struct {
	Tenant string
	Schema string // source schema
	Table  string // source table
	Column string
	Value  string // PostgreSQL's text output of the value
}

// RowKey is the Subject.Column of a ledger entry that names one row by its
// primary key rather than a subject by its column: a delete carries only
// the key, so its record is recognised by the key of a row that was the
// subject's. The Value of such an entry is KeyValue of the key's values.
const RowKey = ""

// KeyValue encodes the PostgreSQL text of a row's primary-key values
// (tenant column excluded, in the table's column order) as the Value of a
// RowKey entry.
func KeyValue(texts []string) string {
	var b []byte
	var n [4]byte
	for _, t := range texts {
		binary.BigEndian.PutUint32(n[:], uint32(len(t)))
		b = append(append(b, n[:]...), t...)
	}
	return string(b)
}

// Hash returns the keyed hash of s: HMAC-SHA256 of its fields, each
// prefixed by its length, so no two subjects share an input.
func (k Keys) Hash(s Subject) Hash {
	return k.hash(hmac.New(sha256.New, k.hashKey), s)
}

func (k Keys) hash(m hash.Hash, s Subject) Hash {
	var n [4]byte
	for _, f := range [...]string{s.Tenant, s.Schema, s.Table, s.Column, s.Value} {
		binary.BigEndian.PutUint32(n[:], uint32(len(f)))
		m.Write(n[:])
		m.Write([]byte(f))
	}
	var h Hash
	m.Sum(h[:0])
	return h
}
