package idempotency

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// KeyTable is the key table of the general pattern, in walhouse's own
// schema. Capture leaves it out of the pipeline unless asked
// (capture.WithIdempotencyKeys).
const KeyTable = "walhouse.idempotency_keys"

// TenantSetting is the PostgreSQL setting that holds the current
// transaction's tenant. The row-level security policies of the key table
// (and of application tables that use RowLevelSecurity) compare the
// tenant column with it; an unset or empty setting matches no row.
const TenantSetting = "walhouse.tenant"

// PrunerRole is the role whose members may prune the key table (Pruner):
// they may delete keys older than a day, of every tenant, and read no more
// of them than their tenant, key and age. Migrate creates it (NOLOGIN);
// grant it to the login that prunes, and to no application role:
// GRANT walhouse_idempotency_pruner TO walhouse_pruner.
const PrunerRole = "walhouse_idempotency_pruner"

// DB is what the package needs of PostgreSQL: a *pgxpool.Pool or a
// *pgx.Conn (one attempt at a time).
type DB interface {
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
}

// Request is one attempt of a keyed write.
type Request struct {
	// Tenant scopes the key: the same key of two tenants is two keys, and
	// no tenant can see or replay another's. Required.
	Tenant string
	// Key is the write's key, the same on every retry. The zero Key means
	// an unkeyed write: a plain transaction with the tenant set.
	Key Key
	// Fingerprint is the hash of the canonical request (FingerprintOf): a
	// retry must carry the same one.
	Fingerprint Fingerprint
	// Principal scopes the key within the tenant, when the application
	// has one (the authenticated user or API client): it is bound into
	// the stored fingerprint, so only the same principal gets the first
	// attempt's result replayed, and another principal's use of the key
	// is refused (*MismatchError) without running or showing anything.
	// Optional; keys stay one per tenant in the key table either way.
	Principal string
	// InFlightWait bounds how long this attempt waits for another attempt
	// with the same key that is still running: after it, Begin returns
	// ErrInFlight. 0 waits as long as ctx allows, then replays what the
	// other attempt committed (or runs, if it rolled back).
	InFlightWait time.Duration
}

// Attempt is a claimed key: either a transaction for the first attempt's
// effect, or the replay of a completed one. Every Attempt must end with
// Commit or Rollback (both are no-ops on a replay).
type Attempt interface {
	// Replayed returns the result stored by the attempt that committed,
	// and true, when this attempt is a retry of it; nothing is to be done.
	Replayed() (result []byte, ok bool)
	// Tx is the transaction the effect belongs in, with the tenant set;
	// nil on a replay.
	Tx() pgx.Tx
	// Commit stores result with the key and commits the effect and the key
	// together. If Commit returns an error the outcome may be unknown (the
	// connection broke during COMMIT): retry with the same key, which
	// replays the result if the commit happened.
	Commit(ctx context.Context, result []byte) error
	// Rollback abandons the attempt: nothing of it stays, and a retry with
	// the key runs again.
	Rollback(ctx context.Context) error
}

// Store begins attempts; *Keys is the PostgreSQL one. Middleware takes a
// Store so that its state machine can be tested without a database.
type Store interface {
	Begin(ctx context.Context, r Request) (Attempt, error)
}

// Keys is the key table of the general pattern: a key, its fingerprint and
// its result are written in the same transaction as the effect, so either
// both are committed or neither is. Safe for concurrent use.
type Keys struct {
	db     DB
	txOpts pgx.TxOptions
}

// Option configures Keys.
type Option func(*Keys)

// WithTxOptions sets the options of the transactions Keys begins (default:
// READ COMMITTED). Under REPEATABLE READ or SERIALIZABLE a retry that
// races the first attempt fails with a serialization error instead of
// waiting for it; retry it.
func WithTxOptions(o pgx.TxOptions) Option { return func(k *Keys) { k.txOpts = o } }

var _ Store = (*Keys)(nil)

// New returns the key table on db. The table must exist (Migrate).
func New(db DB, opts ...Option) *Keys {
	k := &Keys{db: db, txOpts: pgx.TxOptions{IsoLevel: pgx.ReadCommitted}}
	for _, o := range opts {
		o(k)
	}
	return k
}

// Outcome is what Do returns: the result of the write, and whether it was
// replayed from an earlier attempt instead of done now.
type Outcome struct {
	Result   []byte
	Replayed bool
	// Token is the write's consistency token: a WAL position read after
	// the commit (on a replay: read now, after the original's commit).
	// Zero when it could not be read (TokenErr); the write stands.
	Token    Token
	TokenErr error
}

// Do runs fn once per key: the first attempt runs fn in a transaction with
// the tenant set and commits its effect with the key and fn's result; a
// retry (same tenant, key and fingerprint) returns that result without
// running fn, also when the first attempt's caller never learnt of it (its
// response was lost). fn's error rolls everything back, so a retry runs
// again. The same key with another fingerprint returns a *MismatchError.
func (k *Keys) Do(ctx context.Context, r Request, fn func(ctx context.Context, tx pgx.Tx) ([]byte, error)) (Outcome, error) {
	a, err := k.Begin(ctx, r)
	if err != nil {
		return Outcome{}, err
	}
	if res, ok := a.Replayed(); ok {
		out := Outcome{Result: res, Replayed: true}
		out.Token, out.TokenErr = a.(*attempt).Token(ctx)
		return out, nil
	}
	res, err := fn(ctx, a.Tx())
	if err != nil {
		_ = a.Rollback(context.WithoutCancel(ctx))
		return Outcome{}, err
	}
	if err := a.Commit(ctx, res); err != nil {
		return Outcome{}, err
	}
	out := Outcome{Result: res}
	out.Token, out.TokenErr = a.(*attempt).Token(ctx)
	return out, nil
}

// Begin claims r's key in a new transaction. It returns a fresh attempt
// (the key was unused), a replay (a committed attempt with the same
// fingerprint), a *MismatchError (another fingerprint), or ErrInFlight
// (another attempt holds the key longer than r.InFlightWait). An attempt
// with the same key that is running waits for it, by PostgreSQL's own
// unique-index locking: exactly one of two concurrent attempts does the
// effect.
func (k *Keys) Begin(ctx context.Context, r Request) (Attempt, error) {
	if r.Tenant == "" {
		return nil, ErrNoTenant
	}
	tx, err := k.db.BeginTx(ctx, k.txOpts)
	if err != nil {
		return nil, fmt.Errorf("idempotency: begin a transaction: %w", err)
	}
	a, err := claim(ctx, tx, r, k.db)
	if err != nil || a.replay != nil {
		_ = tx.Rollback(context.WithoutCancel(ctx))
	}
	if err != nil {
		return nil, err
	}
	return a, nil
}

// claim sets the tenant and claims the key in tx.
func claim(ctx context.Context, tx pgx.Tx, r Request, db DB) (*attempt, error) {
	a := &attempt{tx: tx, r: r, db: db}
	if r.Key.IsZero() {
		return a, SetTenant(ctx, tx, r.Tenant)
	}
	// A key pruned between the INSERT and the SELECT is claimed again.
	for range 3 {
		claimed, err := insertKey(ctx, tx, r)
		if err != nil {
			return nil, err
		}
		if claimed {
			return a, nil
		}
		var fp, result []byte
		err = tx.QueryRow(ctx, `SELECT fingerprint, result FROM `+KeyTable+` WHERE tenant_id = $1 AND idempotency_key = $2`, r.Tenant, r.Key).Scan(&fp, &result)
		if errors.Is(err, pgx.ErrNoRows) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("idempotency: read key %s: %w", r.Key, err)
		}
		if want := r.boundFingerprint(); string(fp) != string(want[:]) {
			return nil, &MismatchError{Tenant: r.Tenant, Key: r.Key, Detail: "fingerprint " + Fingerprint(fp).String() + " then, " + want.String() + " now (request and principal)"}
		}
		if result == nil {
			result = []byte{}
		}
		a.replay = result
		return a, nil
	}
	return nil, fmt.Errorf("idempotency: key %s kept disappearing while claimed (pruned each time?)", r.Key)
}

// boundFingerprint is the fingerprint stored with the key: r.Fingerprint,
// bound to r.Principal when there is one.
func (r Request) boundFingerprint() Fingerprint {
	if r.Principal == "" {
		return r.Fingerprint
	}
	return FingerprintBytes("principal "+r.Principal, r.Fingerprint[:])
}

// insertKey inserts the key row, waiting for a concurrent attempt that
// inserted it first; it reports whether this attempt's row went in.
func insertKey(ctx context.Context, tx pgx.Tx, r Request) (bool, error) {
	fp := r.boundFingerprint()
	b := &pgx.Batch{}
	b.Queue(`SELECT set_config('`+TenantSetting+`', $1, true)`, r.Tenant)
	if r.InFlightWait > 0 {
		// Only the claim waits this little: the effect's own lock waits
		// keep the session's lock_timeout.
		b.Queue(`SELECT set_config('walhouse.saved_lock_timeout', current_setting('lock_timeout'), true)`)
		b.Queue(`SELECT set_config('lock_timeout', $1, true)`, fmt.Sprintf("%dms", max(1, r.InFlightWait.Milliseconds())))
	}
	insertAt := b.Len()
	b.Queue(`INSERT INTO `+KeyTable+` (tenant_id, idempotency_key, fingerprint) VALUES ($1, $2, $3)
		ON CONFLICT (tenant_id, idempotency_key) DO NOTHING`, r.Tenant, r.Key, fp[:])
	if r.InFlightWait > 0 {
		b.Queue(`SELECT set_config('lock_timeout', current_setting('walhouse.saved_lock_timeout'), true)`)
	}
	br := tx.SendBatch(ctx, b)
	defer br.Close()
	claimed := false
	for i := range b.Len() {
		tag, err := br.Exec()
		if err != nil {
			var pgErr *pgconn.PgError
			switch {
			case errors.As(err, &pgErr) && pgErr.Code == "55P03": // lock_not_available: lock_timeout
				return false, fmt.Errorf("%w (tenant %q, key %s): retry later with the same key", ErrInFlight, r.Tenant, r.Key)
			case errors.As(err, &pgErr) && pgErr.Code == "42P01": // undefined_table
				return false, fmt.Errorf("idempotency: claim key %s: the key table %s is missing; create it with idempotency.Migrate: %w", r.Key, KeyTable, err)
			}
			return false, fmt.Errorf("idempotency: claim key %s: %w", r.Key, err)
		}
		if i == insertAt {
			claimed = tag.RowsAffected() == 1
		}
	}
	return claimed, br.Close()
}

// SetTenant sets the tenant of tx for the row-level security policies
// (TenantSetting), until tx ends. Attempts set it themselves; use it for
// other transactions on tables protected by RowLevelSecurity.
func SetTenant(ctx context.Context, tx pgx.Tx, tenant string) error {
	if tenant == "" {
		return ErrNoTenant
	}
	if _, err := tx.Exec(ctx, `SELECT set_config('`+TenantSetting+`', $1, true)`, tenant); err != nil {
		return fmt.Errorf("idempotency: set the tenant: %w", err)
	}
	return nil
}

// TokenAttempt is an Attempt that gives its write's consistency token
// (Token); Keys' attempts are ones. Middleware sends it as TokenHeader.
type TokenAttempt interface {
	Attempt
	// Token returns the consistency token of the committed write: read
	// after Commit, or, on a replay, read now (after the original's
	// commit, so it covers it). Before Commit it is an error.
	Token(ctx context.Context) (Token, error)
}

var _ TokenAttempt = (*attempt)(nil)

// attempt is Keys' Attempt.
type attempt struct {
	tx        pgx.Tx
	r         Request
	db        DB
	replay    []byte // non-nil on a replay
	committed bool
	token     Token // read once, by Token
	tokenErr  error
}

func (a *attempt) Token(ctx context.Context) (Token, error) {
	if a.replay == nil && !a.committed {
		return Token{}, errors.New("idempotency: no consistency token before the attempt committed")
	}
	if a.token.IsZero() {
		// Read after COMMIT returned, so at or after the commit record. On
		// a replay, after the original's commit too: storing the
		// original's own token would cost a second write per request.
		a.token, a.tokenErr = readToken(ctx, a.db)
	}
	return a.token, a.tokenErr
}

func (a *attempt) Replayed() ([]byte, bool) { return a.replay, a.replay != nil }

func (a *attempt) Tx() pgx.Tx {
	if a.replay != nil {
		return nil
	}
	return a.tx
}

func (a *attempt) Commit(ctx context.Context, result []byte) error {
	if a.replay != nil {
		return nil
	}
	if !a.r.Key.IsZero() {
		if result == nil {
			result = []byte{}
		}
		if _, err := a.tx.Exec(ctx, `UPDATE `+KeyTable+` SET result = $3 WHERE tenant_id = $1 AND idempotency_key = $2`, a.r.Tenant, a.r.Key, result); err != nil {
			_ = a.tx.Rollback(context.WithoutCancel(ctx))
			return fmt.Errorf("idempotency: store the result of key %s: %w", a.r.Key, err)
		}
	}
	if err := a.tx.Commit(ctx); err != nil {
		return fmt.Errorf("idempotency: commit key %s (the outcome may be unknown: retry with the same key): %w", a.r.Key, err)
	}
	a.committed = true
	return nil
}

func (a *attempt) Rollback(ctx context.Context) error {
	if a.replay != nil {
		return nil
	}
	if err := a.tx.Rollback(ctx); err != nil && !errors.Is(err, pgx.ErrTxClosed) {
		return fmt.Errorf("idempotency: roll back key %s: %w", a.r.Key, err)
	}
	return nil
}
