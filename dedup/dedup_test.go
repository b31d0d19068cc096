package dedup

import (
	"crypto/tls"
	"strings"
	"testing"
)

func TestOptions(t *testing.T) {
	tlsCfg := &tls.Config{ServerName: "cache"}
	for _, tc := range []struct {
		name       string
		cfg        Config
		addr, user string
		password   string
		db         int
		tls        bool
		err        string
	}{
		{"host:port", Config{Addr: "cache:6379", Username: "u", Password: "p"}, "cache:6379", "u", "p", 0, false, ""},
		{"host:port with TLS", Config{Addr: "cache:6380", TLS: tlsCfg}, "cache:6380", "", "", 0, true, ""},
		{"redis URL", Config{Addr: "redis://u:p@cache:6379/2"}, "cache:6379", "u", "p", 2, false, ""},
		{"rediss URL", Config{Addr: "rediss://:p@cache:6380"}, "cache:6380", "", "p", 0, true, ""},
		{"URL and settings", Config{Addr: "redis://cache:6379", Username: "u", Password: "p", TLS: tlsCfg}, "cache:6379", "u", "p", 0, true, ""},
		{"password twice", Config{Addr: "redis://u:s3cret@cache:6379", Password: "p"}, "", "", "", 0, false, "keep one"},
		{"bad URL", Config{Addr: "redis://u:s3cret@cache:port"}, "", "", "", 0, false, "neither host:port nor"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts, err := options(tc.cfg)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", err, tc.err)
				}
				if strings.Contains(err.Error(), "s3cret") {
					t.Errorf("error %q holds the password", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if opts.Addr != tc.addr || opts.Username != tc.user || opts.Password != tc.password || opts.DB != tc.db || (opts.TLSConfig != nil) != tc.tls {
				t.Errorf("options = addr %q user %q password %q db %d tls %v", opts.Addr, opts.Username, opts.Password, opts.DB, opts.TLSConfig != nil)
			}
		})
	}
}
