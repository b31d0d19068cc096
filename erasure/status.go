package erasure

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"

	"github.com/walhouse/walhouse/schema"
)

// The states of an erasure, as ManifestTable records them and Status
// reports them.
const (
	StateStarted  = "started"
	StateFinished = "finished"
	StateFailed   = "failed"
	// StateAbandoned is a started erasure with no end recorded within
	// DefaultRunTimeout: its run was cut short (serve stopped). Run it
	// again; it is idempotent.
	StateAbandoned = "abandoned"
)

// DefaultRunTimeout bounds a detached erasure's run (POST /v1/erasures):
// its settle wait and mutations. A started erasure older than this with
// no end recorded is StateAbandoned.
const DefaultRunTimeout = 30 * time.Minute

// ClickHouse's codes for a missing table, database and column.
const (
	chUnknownIdentifier = 47
	chUnknownTable      = 60
	chUnknownDatabase   = 81
)

// ErrNoErasure is Status's answer for an id that is not an erasure of the
// tenant (the same for another tenant's).
var ErrNoErasure = errors.New("no such erasure")

// Status is where an erasure stands.
type Status struct {
	ID    string `json:"id"`
	State string `json:"state"`
	// Error is why a failed erasure failed.
	Error string `json:"error,omitempty"`
	// Manifest is the signed manifest of a finished erasure, the
	// unsigned one as far as it got otherwise.
	Manifest Manifest `json:"manifest"`
}

// Status returns where erasure id of tenant stands, from ManifestTable,
// so any serve replica answers for an erasure another one runs. It only
// reads: a client polls it, and each poll must not be DDL on a table every
// serve shares (nor need the privileges for it).
func (e *Eraser) Status(ctx context.Context, tenant, id string) (Status, error) {
	q := fmt.Sprintf("SELECT state, error, finished_at, manifest FROM %s.%s WHERE erasure_id = {id:String} AND tenant = {tenant:String}",
		schema.QuoteIdent(e.database), schema.QuoteIdent(ManifestTable))
	rows, err := e.conn.Query(chParams(ctx, map[string]string{"id": id, "tenant": tenant}), q)
	if ex, ok := errors.AsType[*ch.Exception](err); ok && (ex.Code == chUnknownTable || ex.Code == chUnknownDatabase || ex.Code == chUnknownIdentifier) {
		// No erasure tables yet (or one made before erasures ran
		// detached, without state): no erasure this version started.
		return Status{}, ErrNoErasure
	}
	if err != nil {
		return Status{}, fmt.Errorf("read the erasure's state: %w", err)
	}
	defer rows.Close()
	rank := map[string]int{StateStarted: 1, StateFailed: 2, StateFinished: 3}
	st := Status{ID: id}
	var started time.Time
	for rows.Next() {
		var (
			state, errText, body string
			at                   time.Time
		)
		if err := rows.Scan(&state, &errText, &at, &body); err != nil {
			return Status{}, fmt.Errorf("read the erasure's state: %w", err)
		}
		if state == StateStarted {
			started = at
		}
		if rank[state] <= rank[st.State] {
			continue
		}
		var m Manifest
		if err := json.Unmarshal([]byte(body), &m); err != nil {
			return Status{}, fmt.Errorf("read the erasure's manifest: %w", err)
		}
		st.State, st.Error, st.Manifest = state, errText, m
	}
	if err := rows.Err(); err != nil {
		return Status{}, fmt.Errorf("read the erasure's state: %w", err)
	}
	if st.State == "" {
		return Status{}, ErrNoErasure
	}
	if st.State == StateStarted && time.Since(started) > DefaultRunTimeout {
		st.State = StateAbandoned
		st.Error = "no end was recorded within the run's deadline (serve stopped during it?): run the erasure again, it is idempotent"
	}
	return st, nil
}
