package erasure

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/walhouse/walhouse/record"
)

// TableResult is what an erasure did in one ClickHouse table.
type TableResult struct {
	// Table is the ClickHouse table, Source its PostgreSQL table.
	Table  string `json:"table"`
	Source string `json:"source"`
	// Removed is the number of stored versions of the subject's rows
	// (tombstones included) the erasure removed.
	Removed uint64 `json:"versionsRemoved"`
	// Left is the number counted after the removal, without FINAL: 0 for
	// a verified erasure.
	Left uint64 `json:"versionsLeft"`
	// SourceCheck says what was checked in PostgreSQL for this table
	// before anything was removed: CheckSubjectAndKeys, CheckKeysOnly
	// (the subject column is gone from the source table) or
	// CheckTableGone.
	SourceCheck string `json:"sourceCheck,omitempty"`
	// LiveRowsKept counts the rows with a version of the subject that
	// PostgreSQL still holds under another value: kept, only their
	// versions carrying the subject removed (their newest does not).
	LiveRowsKept uint64 `json:"liveRowsKept,omitempty"`
}

// Manifest is the signed record of one erasure. It names the subject only
// by its keyed hash (SubjectHMAC), never by value.
type Manifest struct {
	ID          string        `json:"id"`
	Tenant      string        `json:"tenant"`
	Column      string        `json:"subjectColumn"`
	SubjectHMAC string        `json:"subjectHmac"`
	Tables      []TableResult `json:"tables"`
	// TablesSkipped are tables with the subject column and versions of the
	// subject that the erasure could not cover (no walhouse comment naming
	// their source table): a manifest naming any is not verified. Empty
	// fields are left out, so manifests signed before a field existed
	// still verify.
	TablesSkipped []string `json:"tablesSkipped,omitempty"`
	// AsOfLSN is pg_current_wal_insert_lsn() when PostgreSQL was checked:
	// records of the subject committed at or before it are never loaded
	// again, and only versions of changes at or before it are removed.
	AsOfLSN     record.LSN `json:"asOfLsn"`
	Verified    bool       `json:"verified"`
	RequestedBy string     `json:"requestedBy"`
	StartedAt   time.Time  `json:"startedAt"`
	FinishedAt  time.Time  `json:"finishedAt"`
	// PublicKey (hex) verifies Signature (base64 ed25519 over the manifest
	// without its signature, as encoding/json writes it).
	PublicKey string `json:"publicKey"`
	Signature string `json:"signature"`
}

// Sign sets m's PublicKey and Signature.
func (k Keys) Sign(m *Manifest) error {
	m.PublicKey = hex.EncodeToString(k.PublicKey())
	m.Signature = ""
	body, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("encode the manifest: %w", err)
	}
	m.Signature = base64.StdEncoding.EncodeToString(ed25519.Sign(k.sign, body))
	return nil
}

// ErrBadSignature is returned by VerifyManifest for a manifest that was
// altered or signed by another key.
var ErrBadSignature = errors.New("the manifest's signature does not verify")

// VerifyManifest parses a manifest and checks its signature against want,
// the public key of the walhouse that erased (Keys.PublicKey, or the hex
// printed by `walhouse erase public-key`). A manifest with fields it does
// not know, or signed by another key, is refused.
func VerifyManifest(data []byte, want ed25519.PublicKey) (Manifest, error) {
	var m Manifest
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return m, fmt.Errorf("parse the manifest: %w", err)
	}
	pub, err := hex.DecodeString(m.PublicKey)
	if err != nil || len(pub) != ed25519.PublicKeySize {
		return m, fmt.Errorf("%w: publicKey is not an ed25519 key", ErrBadSignature)
	}
	if !bytes.Equal(pub, want) {
		return m, fmt.Errorf("%w: it names public key %s, not %s", ErrBadSignature, m.PublicKey, hex.EncodeToString(want))
	}
	sig, err := base64.StdEncoding.DecodeString(m.Signature)
	if err != nil {
		return m, fmt.Errorf("%w: signature is not base64", ErrBadSignature)
	}
	unsigned := m
	unsigned.Signature = ""
	body, err := json.Marshal(unsigned)
	if err != nil {
		return m, fmt.Errorf("encode the manifest: %w", err)
	}
	if !ed25519.Verify(pub, body, sig) {
		return m, ErrBadSignature
	}
	return m, nil
}

// newID returns a new random erasure id, the manifest's ID.
func newID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "era_" + hex.EncodeToString(b[:])
}
