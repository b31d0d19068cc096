package query

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
)

// Scope is a permission an API key grants.
type Scope string

// The scopes. A key holds any combination.
const (
	// ScopeRead allows GET /v1/tables and table queries, for the key's tenant.
	ScopeRead Scope = "read"
	// ScopeExport allows GDPR subject exports, for the key's tenant.
	ScopeExport Scope = "export"
	// ScopeErase allows GDPR subject erasures (POST /v1/erasures), for
	// the key's tenant. Neither read nor export implies it: an erasure
	// removes data for good.
	ScopeErase Scope = "erase"
	// ScopeAdmin allows the operator endpoints (/v1/lag, /metrics). It
	// grants no access to tenant rows: an operator who must read a
	// tenant's data uses a key of that tenant.
	ScopeAdmin Scope = "admin"
)

// Key is one API key as stored in the keys file: only the SHA-256 of the
// secret is kept.
type Key struct {
	ID string `json:"id"`
	// Hash is the lower-case hex SHA-256 of the secret key (HashKey).
	Hash string `json:"hash"`
	// Tenant is the only tenant the key can read or export; required for
	// the read and export scopes.
	Tenant string  `json:"tenant,omitempty"`
	Scopes []Scope `json:"scopes"`
}

// Has reports whether k grants scope.
func (k Key) Has(scope Scope) bool { return slices.Contains(k.Scopes, scope) }

// Keys is a set of API keys. It is immutable and safe for concurrent use.
type Keys struct {
	byHash map[string]Key
}

// HashKey returns the hex SHA-256 of a secret key, the form the keys file
// stores.
func HashKey(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// NewSecret returns a fresh random secret key ("wh_" and 43 characters).
func NewSecret() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("generate a key: %w", err)
	}
	return "wh_" + base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// LoadKeys reads a keys file: a JSON array of Key.
func LoadKeys(path string) (*Keys, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read the API keys file: %w; create it with entries printed by `walhouse serve --new-key`", err)
	}
	k, err := ParseKeys(data)
	if err != nil {
		return nil, fmt.Errorf("API keys file %s: %w", path, err)
	}
	return k, nil
}

// ParseKeys parses and validates the keys file content, reporting every
// problem at once.
func ParseKeys(data []byte) (*Keys, error) {
	var list []Key
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&list); err != nil {
		return nil, fmt.Errorf("want a JSON array of {\"id\", \"hash\", \"tenant\", \"scopes\"}: %w", err)
	}
	keys := &Keys{byHash: map[string]Key{}}
	ids := map[string]bool{}
	var problems []error
	for i, k := range list {
		where := fmt.Sprintf("key %d (id %q)", i, k.ID)
		if k.ID == "" {
			problems = append(problems, fmt.Errorf("%s: id is empty", where))
		} else if ids[k.ID] {
			problems = append(problems, fmt.Errorf("%s: id is used twice", where))
		}
		ids[k.ID] = true
		k.Hash = strings.ToLower(k.Hash)
		if b, err := hex.DecodeString(k.Hash); err != nil || len(b) != sha256.Size {
			problems = append(problems, fmt.Errorf("%s: hash must be 64 hex digits, the SHA-256 of the key (walhouse serve --hash-key prints it)", where))
		} else if _, dup := keys.byHash[k.Hash]; dup {
			problems = append(problems, fmt.Errorf("%s: the same key hash appears twice", where))
		}
		if len(k.Scopes) == 0 {
			problems = append(problems, fmt.Errorf("%s: scopes is empty; use any of read, export, erase, admin", where))
		}
		for _, s := range k.Scopes {
			switch s {
			case ScopeRead, ScopeExport, ScopeErase:
				if k.Tenant == "" {
					problems = append(problems, fmt.Errorf("%s: scope %s needs a tenant", where, s))
				}
			case ScopeAdmin:
			default:
				problems = append(problems, fmt.Errorf("%s: unknown scope %q; use read, export, erase or admin", where, s))
			}
		}
		keys.byHash[k.Hash] = k
	}
	if err := errors.Join(problems...); err != nil {
		return nil, err
	}
	return keys, nil
}

// Lookup returns the key whose hash matches the presented secret.
func (k *Keys) Lookup(secret string) (Key, bool) {
	if k == nil || secret == "" {
		return Key{}, false
	}
	key, ok := k.byHash[HashKey(secret)]
	return key, ok
}

type keyCtx struct{}

// callerKey returns the authenticated key of a request.
func callerKey(ctx context.Context) (Key, bool) {
	k, ok := ctx.Value(keyCtx{}).(Key)
	return k, ok
}

// requireScope authenticates a request by its bearer key and checks scope.
func (s *Server) requireScope(scope Scope, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		auth := r.Header.Get("Authorization")
		secret, ok := strings.CutPrefix(auth, "Bearer ")
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="walhouse"`)
			s.writeError(w, r, &apiError{Status: http.StatusUnauthorized, Code: "unauthenticated", Message: "send an API key as Authorization: Bearer <key>"})
			return
		}
		secret = strings.TrimSpace(secret)
		key, ok := s.keys.Lookup(secret)
		if !ok && s.cfg.JWT != nil && looksLikeJWT(secret) {
			k, err := s.cfg.JWT.Authenticate(secret)
			if err != nil {
				w.Header().Set("WWW-Authenticate", `Bearer realm="walhouse", error="invalid_token"`)
				s.writeError(w, r, &apiError{Status: http.StatusUnauthorized, Code: "unauthenticated", Message: err.Error()})
				return
			}
			key, ok = k, true
		}
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="walhouse", error="invalid_token"`)
			s.writeError(w, r, &apiError{Status: http.StatusUnauthorized, Code: "unauthenticated", Message: "the API key is not known; check it or ask an operator for one"})
			return
		}
		if !key.Has(scope) {
			s.writeError(w, r, &apiError{Status: http.StatusForbidden, Code: "forbidden", Message: fmt.Sprintf("the API key %q lacks the %s scope this endpoint needs", key.ID, scope)})
			return
		}
		h(w, r.WithContext(context.WithValue(r.Context(), keyCtx{}, key)))
	}
}
