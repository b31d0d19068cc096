package query

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// testIssuer signs JWTs with an Ed25519 key published in a JWKS file.
type testIssuer struct {
	priv ed25519.PrivateKey
	jwks string // path of the JWKS file
}

func newTestIssuer(t *testing.T) *testIssuer {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "jwks.json")
	set := fmt.Sprintf(`{"keys":[{"kty":"OKP","crv":"Ed25519","kid":"k1","alg":"EdDSA","use":"sig","x":%q}]}`, base64.RawURLEncoding.EncodeToString(pub))
	if err := os.WriteFile(path, []byte(set), 0o600); err != nil {
		t.Fatal(err)
	}
	return &testIssuer{priv: priv, jwks: path}
}

func (i *testIssuer) sign(t *testing.T, claims jwt.MapClaims) string {
	t.Helper()
	tok := jwt.NewWithClaims(jwt.SigningMethodEdDSA, claims)
	tok.Header["kid"] = "k1"
	s, err := tok.SignedString(i.priv)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func (i *testIssuer) auth(t *testing.T) *JWTAuth {
	t.Helper()
	a, err := NewJWTAuth(context.Background(), JWTOptions{JWKS: i.jwks, TenantClaim: "org", Issuer: "https://id.example.com", Audience: "walhouse"})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestJWTAuth(t *testing.T) {
	iss := newTestIssuer(t)
	other := newTestIssuer(t)
	s, err := NewServer(Config{Conn: failingConn{err: errConnRefused}, Database: "walhouse", Keys: testKeys(t), CursorSecret: []byte(testCursorSecret), JWT: iss.auth(t)})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	good := func() jwt.MapClaims {
		return jwt.MapClaims{"sub": "user-1", "org": "acme", "iss": "https://id.example.com", "aud": "walhouse", "exp": now.Add(time.Hour).Unix()}
	}
	with := func(k string, v any) jwt.MapClaims {
		c := good()
		if v == nil {
			delete(c, k)
		} else {
			c[k] = v
		}
		return c
	}
	hs := jwt.NewWithClaims(jwt.SigningMethodHS256, good())
	hsToken, _ := hs.SignedString([]byte("a guessed secret"))
	none := jwt.NewWithClaims(jwt.SigningMethodNone, good())
	noneToken, _ := none.SignedString(jwt.UnsafeAllowNoneSignatureType)
	tests := []struct {
		name, path, token string
		status            int
	}{
		{"valid token reads", "/v1/tables", iss.sign(t, good()), 503}, // authenticated; the fake ClickHouse is down
		{"valid token is no admin", "/metrics", iss.sign(t, good()), 403},
		{"valid token cannot erase", "/v1/erasures/x", iss.sign(t, good()), 403},
		{"expired", "/v1/tables", iss.sign(t, with("exp", now.Add(-time.Hour).Unix())), 401},
		{"no expiry", "/v1/tables", iss.sign(t, with("exp", nil)), 401},
		{"not yet valid", "/v1/tables", iss.sign(t, with("nbf", now.Add(time.Hour).Unix())), 401},
		{"other issuer", "/v1/tables", iss.sign(t, with("iss", "https://evil.example.com")), 401},
		{"other audience", "/v1/tables", iss.sign(t, with("aud", "someone-else")), 401},
		{"no tenant claim", "/v1/tables", iss.sign(t, with("org", nil)), 401},
		{"empty tenant", "/v1/tables", iss.sign(t, with("org", "")), 401},
		{"numeric tenant", "/v1/tables", iss.sign(t, with("org", 42)), 401},
		{"tenant as a list", "/v1/tables", iss.sign(t, with("org", []string{"acme", "globex"})), 401},
		{"signed by another key", "/v1/tables", other.sign(t, good()), 401},
		{"HMAC instead of the key", "/v1/tables", hsToken, 401},
		{"alg none", "/v1/tables", noneToken, 401},
		{"tampered payload", "/v1/tables", tamper(iss.sign(t, good())), 401},
		{"API key still works", "/v1/tables", keyAcme, 503},
		{"garbage", "/v1/tables", "a.b.c", 401},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", tt.path, nil)
			r.Header.Set("Authorization", "Bearer "+tt.token)
			w := httptest.NewRecorder()
			s.ServeHTTP(w, r)
			if w.Code != tt.status {
				t.Errorf("status %d, want %d: %s", w.Code, tt.status, w.Body)
			}
		})
	}
}

// tamper swaps the tenant in a signed token's payload for another.
func tamper(token string) string {
	parts := strings.Split(token, ".")
	payload, _ := base64.RawURLEncoding.DecodeString(parts[1])
	parts[1] = base64.RawURLEncoding.EncodeToString([]byte(strings.Replace(string(payload), `"acme"`, `"globex"`, 1)))
	return strings.Join(parts, ".")
}

func TestJWTAuthAuthenticate(t *testing.T) {
	iss := newTestIssuer(t)
	k, err := iss.auth(t).Authenticate(iss.sign(t, jwt.MapClaims{"sub": "u7", "org": "acme", "iss": "https://id.example.com", "aud": []string{"x", "walhouse"}, "exp": time.Now().Add(time.Minute).Unix()}))
	if err != nil {
		t.Fatal(err)
	}
	if k.ID != "jwt:u7" || k.Tenant != "acme" || len(k.Scopes) != 1 || k.Scopes[0] != ScopeRead {
		t.Errorf("key %+v", k)
	}
}

func TestNewJWTAuthRefuses(t *testing.T) {
	iss := newTestIssuer(t)
	bad := filepath.Join(t.TempDir(), "bad.json")
	_ = os.WriteFile(bad, []byte(`{"keys":`), 0o600)
	for name, o := range map[string]JWTOptions{
		"no jwks":      {},
		"missing file": {JWKS: filepath.Join(t.TempDir(), "nope.json")},
		"bad file":     {JWKS: bad},
		"admin scope":  {JWKS: iss.jwks, Scopes: []Scope{ScopeAdmin}},
		"erase scope":  {JWKS: iss.jwks, Scopes: []Scope{ScopeRead, ScopeErase}},
	} {
		if _, err := NewJWTAuth(context.Background(), o); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
