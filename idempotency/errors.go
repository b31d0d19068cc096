package idempotency

import (
	"errors"
	"fmt"
)

// ErrInFlight is returned when another attempt with the same key is still
// running and did not end within Request.InFlightWait. Retry later with the
// same key: the other attempt's outcome is then replayed, or, if it failed,
// the retry runs.
var ErrInFlight = errors.New("an attempt with the same idempotency key is in flight")

// ErrNoTenant is returned for a request without a tenant: keys are scoped
// per tenant, and an empty tenant would be what an unset tenant setting
// reads as in PostgreSQL.
var ErrNoTenant = errors.New("idempotency: a tenant is required (keys are scoped per tenant)")

// ErrKeyReused is the condition of every *MismatchError: a key that was
// used for another request. Test with errors.Is.
var ErrKeyReused = errors.New("idempotency key reused for a different request")

// MismatchError is returned when a key is used again for a request other
// than the one it was first used for (another fingerprint, or another
// row). The first request's effect stands; nothing of the second one was
// done. The client must use a new key for a new request.
type MismatchError struct {
	Tenant string
	Key    Key
	// What differs, for the log: "fingerprint", or the columns of a row.
	Detail string
}

func (e *MismatchError) Error() string {
	return fmt.Sprintf("idempotency key %s of tenant %q was first used for a different request (%s): nothing was done; use a new key for a new request", e.Key, e.Tenant, e.Detail)
}

// Unwrap makes errors.Is(err, ErrKeyReused) true.
func (e *MismatchError) Unwrap() error { return ErrKeyReused }
