package dedup

import (
	"context"
	"crypto/tls"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/walhouse/walhouse/harness/testenv"
	"github.com/walhouse/walhouse/record"
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

// eventIDs made by record.EventID in one window of commit time fall into
// at most 16 buckets; other ids get a bucket each; every position is
// kept.
func TestGroup(t *testing.T) {
	s := &Store{prefix: "p:"}
	at := time.Unix(1_700_000_000, 250_000_000)
	var ids []string
	for i := range 200 {
		ids = append(ids, record.EventID("src", record.LSN(1000), uint32(i), at))
	}
	ids = append(ids, "e1", record.EventID("src", record.LSN(2000), 0, at.Add(9*time.Second)), "e1", record.EventID("src", record.LSN(3000), 0, at.Add(10*time.Second)))
	groups := s.group(ids)
	seen := make([]bool, len(ids))
	perWindow := map[string]int{}
	for _, g := range groups {
		if len(g.fields) != len(g.at) {
			t.Fatalf("bucket %s: %d fields, %d positions", g.key, len(g.fields), len(g.at))
		}
		for j, i := range g.at {
			if seen[i] {
				t.Errorf("id %d in two buckets", i)
			}
			seen[i] = true
			if ids[i] == "e1" {
				if g.key != "p:v2:id:e1" || g.fields[j] != "h" {
					t.Errorf("id e1 stored at %s/%q, want p:v2:id:e1/h", g.key, g.fields[j])
				}
				continue
			}
			if len(g.fields[j]) != 16 {
				t.Errorf("field of %s is %d bytes, want 16", ids[i], len(g.fields[j]))
			}
			window := g.key[:strings.LastIndexByte(g.key, ':')]
			perWindow[window]++
		}
	}
	for i, ok := range seen {
		if !ok {
			t.Errorf("id %d in no bucket", i)
		}
	}
	want := map[string]int{"p:v2:1700000000": 201, "p:v2:1700000010": 1}
	if fmt.Sprint(perWindow) != fmt.Sprint(want) {
		t.Errorf("ids per window %v, want %v", perWindow, want)
	}
	if n := len(groups); n > 16+1+2 {
		t.Errorf("%d buckets, want at most 16 for the first window, 1 for the next and 2 for e1", n)
	}
}

// Against the local Redis: remembered ids are found with their hashes,
// others are not, and every key the store wrote expires.
func TestIntegrationStoreLookupRemember(t *testing.T) {
	env := testenv.Require(t, "redis")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	prefix := testenv.Name("dedup") + ":"
	t.Cleanup(func() { _ = testenv.DeleteKeys(context.Background(), env.Redis, prefix+"*") })
	s, err := New(Config{Addr: env.Redis, Prefix: prefix, TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	at := time.Now()
	var ids, hashes []string
	for i := range 1000 {
		ids = append(ids, record.EventID("src", record.LSN(i/10+1), uint32(i%10), at.Add(time.Duration(i)*time.Millisecond)))
		hashes = append(hashes, string(rune('a'+i%26))+"h")
	}
	ids, hashes = append(ids, "not-a-uuid"), append(hashes, "x")
	if err := s.Remember(ctx, ids[:600], hashes[:600]); err != nil {
		t.Fatal(err)
	}
	if err := s.Remember(ctx, ids[1000:], hashes[1000:]); err != nil {
		t.Fatal(err)
	}
	got, err := s.Lookup(ctx, ids)
	if err != nil {
		t.Fatal(err)
	}
	for i, h := range got {
		want := ""
		if i < 600 || i == 1000 {
			want = hashes[i]
		}
		if h != want {
			t.Errorf("id %d (%s): hash %q, want %q", i, ids[i], h, want)
		}
	}
	rdb := redis.NewClient(&redis.Options{Addr: env.Redis})
	defer rdb.Close()
	keys, err := rdb.Keys(ctx, prefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) == 0 || len(keys) > 3*16+1 {
		t.Errorf("%d keys for 601 ids over about a second, want 1 to 49", len(keys))
	}
	for _, k := range keys {
		if enc := rdb.ObjectEncoding(ctx, k).Val(); enc != "hashtable" {
			t.Errorf("key %s is a %s, want a hashtable (see tableMarkerValue)", k, enc)
		}
		if ttl := rdb.TTL(ctx, k).Val(); ttl <= 0 || ttl > time.Hour {
			t.Errorf("key %s: TTL %v, want up to 1h", k, ttl)
		}
	}
}
