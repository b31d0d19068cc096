package idempotency

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// TokenHeader is the response header that carries a write's consistency
// token (Token); walhouse's query API accepts it as a request header of
// the same name. It is walhouse's, not the IETF idempotency draft's.
const TokenHeader = "Walhouse-Consistency-Token"

// TokenSQL reads a consistency token in PostgreSQL. Any application can
// run it after its COMMIT returned (on any connection to the same
// database): the position it reads is at or after that commit.
const TokenSQL = `SELECT 'wh1.' || s.system_identifier || '.' || d.oid || '.' || pg_current_wal_insert_lsn()
  FROM pg_control_system() s JOIN pg_database d ON d.datname = current_database()`

// Token is a consistency token: a WAL position at or after a write's
// commit, and the database it belongs to. A read that waits for it (the
// query API's consistencyToken) sees every write committed before it.
// Its text form, "wh1.<system identifier>.<database OID>.<X/Y>", is
// opaque to clients: pass it on as it is. The zero Token is no token.
type Token struct {
	// SystemID is the cluster's pg_control_system().system_identifier.
	SystemID uint64
	// Database is the database's OID.
	Database uint32
	// LSN is the WAL position, as PostgreSQL's pg_lsn in 64 bits.
	LSN uint64
}

// maxTokenLen bounds the text of a token: "wh1." and three numbers.
const maxTokenLen = 64

// ErrBadToken is wrapped by ParseToken's errors.
var ErrBadToken = errors.New("not a walhouse consistency token")

// IsZero reports whether t is no token.
func (t Token) IsZero() bool { return t == Token{} }

// String returns the token's text form.
func (t Token) String() string {
	if t.IsZero() {
		return ""
	}
	return fmt.Sprintf("wh1.%d.%d.%X/%X", t.SystemID, t.Database, t.LSN>>32, uint32(t.LSN))
}

// SameSource reports whether t and u name the same database.
func (t Token) SameSource(u Token) bool {
	return t.SystemID == u.SystemID && t.Database == u.Database
}

// Covers reports whether a read that waited for t also waited for u: same
// database, and t's position at or after u's.
func (t Token) Covers(u Token) bool { return t.SameSource(u) && t.LSN >= u.LSN }

// ParseToken parses a token's text form (Token.String, TokenSQL).
func ParseToken(s string) (Token, error) {
	if len(s) > maxTokenLen {
		return Token{}, fmt.Errorf("%w: %d bytes, more than %d", ErrBadToken, len(s), maxTokenLen)
	}
	rest, ok := strings.CutPrefix(s, "wh1.")
	parts := strings.Split(rest, ".")
	if !ok || len(parts) != 3 {
		return Token{}, fmt.Errorf("%w: want wh1.<system id>.<database oid>.<lsn>", ErrBadToken)
	}
	sys, err := strconv.ParseUint(parts[0], 10, 64)
	if err != nil || sys == 0 {
		return Token{}, fmt.Errorf("%w: bad system identifier %q", ErrBadToken, parts[0])
	}
	db, err := strconv.ParseUint(parts[1], 10, 32)
	if err != nil || db == 0 {
		return Token{}, fmt.Errorf("%w: bad database OID %q", ErrBadToken, parts[1])
	}
	hi, lo, ok := strings.Cut(parts[2], "/")
	h, err1 := strconv.ParseUint(hi, 16, 32)
	l, err2 := strconv.ParseUint(lo, 16, 32)
	if !ok || err1 != nil || err2 != nil {
		return Token{}, fmt.Errorf("%w: bad WAL position %q, want X/Y in hexadecimal", ErrBadToken, parts[2])
	}
	return Token{SystemID: sys, Database: uint32(db), LSN: h<<32 | l}, nil
}

// ParseSource parses a database's identity as "SYSID.OID" (its
// system identifier and OID): a Token with LSN 0, for Token.SameSource.
func ParseSource(s string) (Token, error) {
	t, err := ParseToken("wh1." + s + ".0/0")
	if err != nil {
		return Token{}, fmt.Errorf("%q is not SYSID.OID (pg_control_system()'s system_identifier, pg_database's oid): %w", s, err)
	}
	return t, nil
}

// Querier runs one query; *pgxpool.Pool, *pgx.Conn and pgx.Tx are ones.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// ReadToken reads a consistency token (TokenSQL) on q. Read it after the
// write's COMMIT returned, never inside the write's transaction: a
// position read before the commit is before the commit record.
func ReadToken(ctx context.Context, q Querier) (Token, error) {
	var s string
	if err := q.QueryRow(ctx, TokenSQL).Scan(&s); err != nil {
		return Token{}, fmt.Errorf("idempotency: read the consistency token (EXECUTE on pg_control_system() is needed): %w", err)
	}
	return ParseToken(s)
}

// readToken reads a token on db after a commit: with one round trip when
// db can run a query outside a transaction, else in a transaction of its
// own.
func readToken(ctx context.Context, db DB) (Token, error) {
	if q, ok := db.(Querier); ok {
		return ReadToken(ctx, q)
	}
	tx, err := db.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
	if err != nil {
		return Token{}, fmt.Errorf("idempotency: read the consistency token: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	return ReadToken(ctx, tx)
}
