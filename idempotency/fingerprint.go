package idempotency

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/gowebpki/jcs"
)

// Fingerprint is the SHA-256 hash of a canonical request: what a key was
// first used for. A retry must carry the same fingerprint; the same key with
// another fingerprint is refused (*MismatchError).
type Fingerprint [32]byte

// String returns the fingerprint in hexadecimal.
func (f Fingerprint) String() string { return hex.EncodeToString(f[:]) }

// FingerprintOf returns the fingerprint of operation applied to request.
// request is encoded as JSON and canonicalised by RFC 8785 (JSON
// Canonicalization Scheme: members sorted, numbers and strings in one
// spelling), so two encodings of the same request, with fields in another
// order or numbers written differently, have the same fingerprint.
// operation names what is done ("create order", "POST /v1/orders"): the same
// payload sent to two operations is two requests.
func FingerprintOf(operation string, request any) (Fingerprint, error) {
	raw, err := json.Marshal(request)
	if err != nil {
		return Fingerprint{}, fmt.Errorf("fingerprint %s: encode the request as JSON: %w", operation, err)
	}
	return FingerprintJSON(operation, raw)
}

// FingerprintJSON is FingerprintOf for a request that is JSON already (an
// HTTP body). It fails if raw is not valid JSON.
func FingerprintJSON(operation string, raw []byte) (Fingerprint, error) {
	canon, err := jcs.Transform(raw)
	if err != nil {
		return Fingerprint{}, fmt.Errorf("fingerprint %s: canonicalise the JSON request: %w", operation, err)
	}
	return FingerprintBytes(operation, canon), nil
}

// FingerprintBytes is the fingerprint of operation applied to a request
// that is canonical already: its bytes are hashed as they are.
func FingerprintBytes(operation string, canonical []byte) Fingerprint {
	h := sha256.New()
	// The operation's length first: ("ab", "c") and ("a", "bc") differ.
	fmt.Fprintf(h, "%d:%s", len(operation), operation)
	h.Write(canonical)
	var f Fingerprint
	h.Sum(f[:0])
	return f
}
