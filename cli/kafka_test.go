package cli

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// writeCert writes a self-signed certificate and its key as PEM files.
func writeCert(t *testing.T, dir string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "walhouse test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

func TestKafkaSecurityOptions(t *testing.T) {
	dir := t.TempDir()
	cert, key := writeCert(t, dir)
	notPEM := filepath.Join(dir, "not.pem")
	pwFile := filepath.Join(dir, "password")
	if err := os.WriteFile(notPEM, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pwFile, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		sec      KafkaSecurity
		password string // WALHOUSE_KAFKA_SASL_PASSWORD
		opts     int
		err      string // part of the error; empty: none
	}{
		{"nothing", KafkaSecurity{}, "", 0, ""},
		{"tls", KafkaSecurity{TLS: TLSFlags{on: true}}, "", 1, ""},
		{"tls with a CA", KafkaSecurity{TLS: TLSFlags{ca: cert}}, "", 1, ""},
		{"mutual tls", KafkaSecurity{TLS: TLSFlags{ca: cert, cert: cert, key: key}}, "", 1, ""},
		{"missing CA file", KafkaSecurity{TLS: TLSFlags{ca: filepath.Join(dir, "nope.pem")}}, "", 0, "--kafka-tls-ca"},
		{"CA not PEM", KafkaSecurity{TLS: TLSFlags{ca: notPEM}}, "", 0, "no PEM certificate"},
		{"cert without key", KafkaSecurity{TLS: TLSFlags{cert: cert}}, "", 0, "go together"},
		{"key not matching", KafkaSecurity{TLS: TLSFlags{cert: cert, key: notPEM}}, "", 0, "--kafka-tls-cert/--kafka-tls-key"},
		{"plain", KafkaSecurity{Mechanism: "plain", user: "u"}, "p", 1, ""},
		{"plain over tls", KafkaSecurity{TLS: TLSFlags{on: true}, Mechanism: "PLAIN", user: "u"}, "p", 2, ""},
		{"scram-sha-256", KafkaSecurity{Mechanism: "scram-sha-256", user: "u"}, "p", 1, ""},
		{"scram-sha-512 from a file", KafkaSecurity{Mechanism: "scram-sha-512", user: "u", passwordFile: pwFile}, "", 1, ""},
		{"no password", KafkaSecurity{Mechanism: "plain", user: "u"}, "", 0, "needs --kafka-sasl-user and a password"},
		{"no user", KafkaSecurity{Mechanism: "plain"}, "p", 0, "needs --kafka-sasl-user"},
		{"user without mechanism", KafkaSecurity{user: "u"}, "p", 0, "--kafka-sasl is not"},
		{"unknown mechanism", KafkaSecurity{Mechanism: "gssapi", user: "u"}, "p", 0, "want plain, scram-sha-256 or scram-sha-512"},
		{"unknown mechanism, no user", KafkaSecurity{Mechanism: "gssapi"}, "", 0, "want plain, scram-sha-256 or scram-sha-512"},
		{"missing password file", KafkaSecurity{Mechanism: "plain", user: "u", passwordFile: filepath.Join(dir, "nope")}, "", 0, "--kafka-sasl-password-file"},
		{"every problem at once", KafkaSecurity{TLS: TLSFlags{ca: notPEM}, Mechanism: "x", user: "u"}, "p", 0, "no PEM certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("WALHOUSE_KAFKA_SASL_PASSWORD", tc.password)
			opts, err := tc.sec.options()
			switch {
			case tc.err == "" && err != nil:
				t.Fatalf("error %v", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Fatalf("error %v, want one containing %q", err, tc.err)
			case tc.err == "" && len(opts) != tc.opts:
				t.Fatalf("%d options, want %d", len(opts), tc.opts)
			}
			if tc.name == "every problem at once" && !strings.Contains(err.Error(), "want plain") {
				t.Errorf("error %v names only the first problem", err)
			}
		})
	}
}
