package capture

import "context"

// StateStore keeps the progress capture needs beyond the slot's position:
// which snapshot chunks are done. Values are small JSON documents.
// kafka.State keeps them in the compacted topic kafka.StateTopic.
type StateStore interface {
	// Load returns the latest value saved under key, or nil.
	Load(ctx context.Context, key string) ([]byte, error)
	// Save stores value under key durably before returning.
	Save(ctx context.Context, key string, value []byte) error
}
