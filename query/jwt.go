package query

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/MicahParks/keyfunc/v3"
	"github.com/golang-jwt/jwt/v5"
)

// JWTOptions configure bearer JWTs as credentials beside API keys: a
// token signed by a key of the JWKS, unexpired, names its tenant in a
// claim. Such a token is a key of that tenant with Scopes.
type JWTOptions struct {
	// JWKS is a file holding a JWK Set, or an https:// (or http://) URL
	// serving one, refreshed hourly and when a token names an unknown kid
	// (at most every 5 minutes).
	JWKS string
	// TenantClaim names the claim that holds the tenant, a non-empty
	// string (default "tenant").
	TenantClaim string
	// Issuer and Audience, when set, must match the token's iss and aud.
	Issuer   string
	Audience string
	// Scopes a token grants: read and export only (default read); a JWT
	// never grants erase nor admin.
	Scopes []Scope
	// Leeway tolerates clock skew on exp and nbf (default 30 s).
	Leeway time.Duration
}

// JWTAuth verifies bearer JWTs (NewJWTAuth). It is safe for concurrent
// use.
type JWTAuth struct {
	keyfunc jwt.Keyfunc
	parser  *jwt.Parser
	claim   string
	scopes  []Scope
}

// jwtMethods are the signature algorithms accepted: asymmetric only, so a
// public JWKS can never sign (and "none" never passes).
var jwtMethods = []string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}

// NewJWTAuth loads the JWKS of o. For a URL, the refresh runs until ctx
// ends.
func NewJWTAuth(ctx context.Context, o JWTOptions) (*JWTAuth, error) {
	var problems []error
	if o.TenantClaim == "" {
		o.TenantClaim = "tenant"
	}
	if len(o.Scopes) == 0 {
		o.Scopes = []Scope{ScopeRead}
	}
	for _, s := range o.Scopes {
		if s != ScopeRead && s != ScopeExport {
			problems = append(problems, fmt.Errorf("query: JWT scope %q: a token may grant read and export only (--jwt-scopes)", s))
		}
	}
	if o.Leeway == 0 {
		o.Leeway = 30 * time.Second
	}
	if o.JWKS == "" {
		problems = append(problems, errors.New("query: JWTOptions.JWKS is empty; give a JWK Set file or URL (--jwt-jwks)"))
	}
	if err := errors.Join(problems...); err != nil {
		return nil, err
	}
	var (
		kf  keyfunc.Keyfunc
		err error
	)
	if u, perr := url.Parse(o.JWKS); perr == nil && (u.Scheme == "https" || u.Scheme == "http") {
		kf, err = keyfunc.NewDefaultCtx(ctx, []string{o.JWKS})
		if err != nil {
			return nil, fmt.Errorf("query: JWKS %s: %w", o.JWKS, err)
		}
	} else {
		raw, rerr := os.ReadFile(o.JWKS)
		if rerr != nil {
			return nil, fmt.Errorf("query: read the JWKS file: %w (--jwt-jwks)", rerr)
		}
		if kf, err = keyfunc.NewJWKSetJSON(raw); err != nil {
			return nil, fmt.Errorf("query: JWKS file %s: %w", o.JWKS, err)
		}
	}
	opts := []jwt.ParserOption{jwt.WithValidMethods(jwtMethods), jwt.WithExpirationRequired(), jwt.WithLeeway(o.Leeway)}
	if o.Issuer != "" {
		opts = append(opts, jwt.WithIssuer(o.Issuer))
	}
	if o.Audience != "" {
		opts = append(opts, jwt.WithAudience(o.Audience))
	}
	return &JWTAuth{keyfunc: kf.Keyfunc, parser: jwt.NewParser(opts...), claim: o.TenantClaim, scopes: slices.Clone(o.Scopes)}, nil
}

// looksLikeJWT tells a JWT (three base64url parts) from an API key.
func looksLikeJWT(token string) bool {
	return strings.Count(token, ".") == 2 && !strings.HasPrefix(token, "wh_")
}

// Authenticate verifies token and returns the key it stands for: ID
// "jwt:" and its subject, the tenant of its claim, the configured scopes.
func (a *JWTAuth) Authenticate(token string) (Key, error) {
	claims := jwt.MapClaims{}
	if _, err := a.parser.ParseWithClaims(token, claims, a.keyfunc); err != nil {
		return Key{}, fmt.Errorf("the bearer token is not valid: %w", err)
	}
	tenant, ok := claims[a.claim].(string)
	if !ok || tenant == "" {
		return Key{}, fmt.Errorf("the bearer token has no claim %q holding the tenant as a non-empty string", a.claim)
	}
	sub, _ := claims.GetSubject()
	return Key{ID: "jwt:" + sub, Tenant: tenant, Scopes: a.scopes}, nil
}
