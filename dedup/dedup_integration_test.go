package dedup

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/walhouse/walhouse/internal/testenv"
	"github.com/walhouse/walhouse/record"
)

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
