package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/walhouse/walhouse/dedup"
	"github.com/walhouse/walhouse/internal/testenv"
)

// Against the local Redis's TLS listener (a throwaway CA, ACL user
// walhouse): the right user, password and CA remember and find an
// eventId, also with a client certificate and with everything in a
// rediss:// URL; a wrong password and a certificate from an unknown CA fail
// at start with the fix instead of a silent fail-open.
func TestIntegrationDedupAuthTLS(t *testing.T) {
	env := testenv.Require(t, "redis-tls")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pwFile := filepath.Join(t.TempDir(), "password")
	if err := os.WriteFile(pwFile, []byte("walhouse-local\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		addr     string
		password string
		sec      dedupSecurity
		want     []string // parts of the error; none: the store works
		auth     bool     // the error is dedup.ErrAuth
	}{
		"user, password and CA":       {env.RedisTLS, "walhouse-local", dedupSecurity{user: "walhouse", ca: env.RedisTLSCA}, nil, false},
		"password from a file":        {env.RedisTLS, "", dedupSecurity{user: "walhouse", ca: env.RedisTLSCA, password: &secretSource{file: pwFile}}, nil, false},
		"client certificate":          {env.RedisTLS, "walhouse-local", dedupSecurity{user: "walhouse", ca: env.RedisTLSCA, cert: env.RedisTLSClientCert, key: env.RedisTLSClientKey}, nil, false},
		"rediss URL":                  {"rediss://walhouse:walhouse-local@" + env.RedisTLS, "", dedupSecurity{ca: env.RedisTLSCA}, nil, false},
		"wrong password":              {env.RedisTLS, "nope", dedupSecurity{user: "walhouse", ca: env.RedisTLSCA}, []string{"refused the login", "check --dedup-user and the password"}, true},
		"wrong password in a URL":     {"rediss://walhouse:nope@" + env.RedisTLS, "", dedupSecurity{ca: env.RedisTLSCA}, []string{"check --dedup-user and the password"}, true},
		"system CAs only":             {env.RedisTLS, "walhouse-local", dedupSecurity{user: "walhouse", tls: true}, []string{"certificate", "--dedup-tls-ca"}, false},
		"rediss URL, system CAs only": {"rediss://walhouse:walhouse-local@" + env.RedisTLS, "", dedupSecurity{}, []string{"--dedup-tls-ca"}, false},
	} {
		t.Run(name, func(t *testing.T) {
			t.Setenv("WALHOUSE_REDIS_PASSWORD", tc.password)
			if tc.sec.password == nil {
				tc.sec.password = &secretSource{}
			}
			tc.sec.password.env, tc.sec.password.fileFlag = "WALHOUSE_REDIS_PASSWORD", "dedup-password-file"
			store, err := openDedup(ctx, dedup.Config{Addr: tc.addr, Prefix: testenv.Name("dedup") + ":"}, &tc.sec)
			if len(tc.want) > 0 {
				if err == nil {
					store.Close()
					t.Fatal("connected")
				}
				t.Logf("refused: %v", err)
				for _, w := range tc.want {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q, want it to mention %q", err, w)
					}
				}
				if errors.Is(err, dedup.ErrAuth) != tc.auth {
					t.Errorf("errors.Is(err, dedup.ErrAuth) = %v, want %v", !tc.auth, tc.auth)
				}
				if strings.Contains(err.Error(), "walhouse-local") || strings.Contains(err.Error(), "nope") {
					t.Errorf("error %q holds a password", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer store.Close()
			if err := store.Remember(ctx, []string{"e1"}, []string{"h1"}); err != nil {
				t.Fatal(err)
			}
			got, err := store.Lookup(ctx, []string{"e1", "e2"})
			if err != nil || len(got) != 2 || got[0] != "h1" || got[1] != "" {
				t.Fatalf("Lookup = %q, %v; want [h1 \"\"]", got, err)
			}
		})
	}
}
