package testenv_test

import (
	"context"
	"os"
	"testing"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walhouse/walhouse/clickhouse"
	"github.com/walhouse/walhouse/harness/testenv"
)

// TestIntegrationServices checks the services of the selected backend
// (WALHOUSE_SERVICES) are what the other integration tests take for
// granted: PostgreSQL with logical decoding and room for their slots, a
// Kafka broker clients reach at the address it advertises, Redis, and
// ClickHouse (over the native protocol under containers). Under
// WALHOUSE_SERVICES=containers without a Docker engine it skips with
// "no Docker engine: …" (or fails under WALHOUSE_INTEGRATION=1).
func TestIntegrationServices(t *testing.T) {
	env := testenv.Require(t, "pg", "kafka", "redis", "clickhouse")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	pg, err := pgx.Connect(ctx, env.PG)
	if err != nil {
		t.Fatalf("PostgreSQL: %v", err)
	}
	defer pg.Close(context.WithoutCancel(ctx))
	var walLevel string
	var slots, senders int
	err = pg.QueryRow(ctx, `SELECT current_setting('wal_level'), current_setting('max_replication_slots')::int, current_setting('max_wal_senders')::int`).
		Scan(&walLevel, &slots, &senders)
	if err != nil {
		t.Fatalf("PostgreSQL settings: %v", err)
	}
	if walLevel != "logical" || slots < 20 || senders < 20 {
		t.Errorf("PostgreSQL has wal_level=%s max_replication_slots=%d max_wal_senders=%d, want logical, 20+, 20+", walLevel, slots, senders)
	}

	// A record produced and read back goes through the broker's advertised
	// listener, which a container must advertise at its host port.
	cl, err := kgo.NewClient(kgo.SeedBrokers(env.Kafka))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	topic := testenv.Name("testenv")
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, topic); err != nil {
		t.Fatalf("Kafka: create topic %s: %v", topic, err)
	}
	defer adm.DeleteTopic(context.WithoutCancel(ctx), topic)
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte("hello")}).FirstErr(); err != nil {
		t.Fatalf("Kafka: produce: %v", err)
	}
	rd, err := kgo.NewClient(kgo.SeedBrokers(env.Kafka), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	fs := rd.PollRecords(ctx, 1)
	if err := fs.Err0(); err != nil {
		t.Fatalf("Kafka: consume: %v", err)
	}
	if rs := fs.Records(); len(rs) != 1 || string(rs[0].Value) != "hello" {
		t.Errorf("Kafka: read back %v, want one record hello", rs)
	}

	rdb := redis.NewClient(&redis.Options{Addr: env.Redis})
	defer rdb.Close()
	if got, err := rdb.Ping(ctx).Result(); err != nil || got != "PONG" {
		t.Errorf("Redis: PING = %q, %v", got, err)
	}

	opts, err := ch.ParseDSN(env.ClickHouse)
	if err != nil {
		t.Fatalf("ClickHouse DSN: %v", err)
	}
	if os.Getenv("WALHOUSE_SERVICES") == testenv.BackendContainers && opts.Protocol != ch.Native {
		t.Errorf("ClickHouse is reached over %v under containers, want the native protocol", opts.Protocol)
	}
	conn, err := clickhouse.Open(ctx, env.ClickHouse)
	if err != nil {
		t.Fatalf("ClickHouse: %v", err)
	}
	defer conn.Close()
	var one uint8
	if err := conn.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil || one != 1 {
		t.Errorf("ClickHouse: SELECT 1 = %d, %v", one, err)
	}
}
