package erasure

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"testing"
	"time"

	"github.com/walhouse/walhouse/record"
)

// A manifest signed before the fields sourceCheck, liveRowsKept and
// tablesSkipped existed still verifies: the new fields, empty, are left
// out of the signed form.
func TestOldManifestStillVerifies(t *testing.T) {
	keys, _ := NewKeys([]byte("erasure key of the test, 32 bytes"))
	type oldTable struct {
		Table   string `json:"table"`
		Source  string `json:"source"`
		Removed uint64 `json:"versionsRemoved"`
		Left    uint64 `json:"versionsLeft"`
	}
	type oldManifest struct {
		ID          string     `json:"id"`
		Tenant      string     `json:"tenant"`
		Column      string     `json:"subjectColumn"`
		SubjectHMAC string     `json:"subjectHmac"`
		Tables      []oldTable `json:"tables"`
		AsOfLSN     record.LSN `json:"asOfLsn"`
		Verified    bool       `json:"verified"`
		RequestedBy string     `json:"requestedBy"`
		StartedAt   time.Time  `json:"startedAt"`
		FinishedAt  time.Time  `json:"finishedAt"`
		PublicKey   string     `json:"publicKey"`
		Signature   string     `json:"signature"`
	}
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	m := oldManifest{ID: "era_1", Tenant: "acme", Column: "customer_id", SubjectHMAC: "ab", Tables: []oldTable{{Table: "orders", Source: "public.orders", Removed: 3}},
		AsOfLSN: 100, Verified: true, RequestedBy: "cli", StartedAt: at, FinishedAt: at, PublicKey: hex.EncodeToString(keys.PublicKey())}
	body, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	m.Signature = base64.StdEncoding.EncodeToString(ed25519.Sign(keys.sign, body))
	signed, _ := json.Marshal(m)
	if _, err := VerifyManifest(signed, keys.PublicKey()); err != nil {
		t.Errorf("a manifest of the earlier form: %v", err)
	}
}
