package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walhouse/walhouse/harness/testenv"
)

// names are the fresh names of everything one run creates. Every one starts
// with base, so a leftover is easy to find and drop by hand.
type names struct {
	base        string
	table       string // schema.table
	publication string
}

func newNames() names {
	base := testenv.Name("bench")
	return names{base: base, table: "public." + base, publication: base + "_pub"}
}

func (n names) slot(role string) string        { return n.base + "_" + role }
func (n names) topicPrefix(role string) string { return n.base + "_" + role }

// bench holds the connections and resources of one run.
type bench struct {
	opts   options
	names  names
	tmp    string
	pg     *pgx.Conn
	kafka  *kgo.Client
	adm    *kadm.Client
	bin    string // the walhouse binary
	undo   testenv.Cleanups
	result results
}

// newBench connects to PostgreSQL and Kafka and builds the walhouse binary.
func newBench(ctx context.Context, opts options) (*bench, error) {
	b := &bench{opts: opts, names: newNames()}
	tmp, err := os.MkdirTemp("", b.names.base+"-")
	if err != nil {
		return nil, fmt.Errorf("make a temporary directory: %w", err)
	}
	b.tmp = tmp
	b.undo.Push("remove "+tmp, func(context.Context) error { return os.RemoveAll(tmp) })
	if err := b.connect(ctx); err != nil {
		return b, err
	}
	if b.bin, err = testenv.BuildBinary(ctx, tmp); err != nil {
		return b, err
	}
	return b, nil
}

func (b *bench) connect(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, b.opts.pgURL)
	if err != nil {
		return fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	b.pg = conn
	b.undo.Push("close PostgreSQL connection", func(ctx context.Context) error { return conn.Close(ctx) })
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.opts.brokers...))
	if err != nil {
		return fmt.Errorf("kafka client: %w", err)
	}
	b.kafka, b.adm = cl, kadm.NewClient(cl)
	b.undo.Push("close Kafka client", func(context.Context) error { cl.Close(); return nil })
	pctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := cl.Ping(pctx); err != nil {
		return fmt.Errorf("reach Kafka at %v: %w", b.opts.brokers, err)
	}
	b.undo.Push("delete topics "+b.names.base+"*", b.deleteTopics)
	return nil
}

// close releases everything the run created, even after ctx ended.
func (b *bench) close() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return b.undo.Run(ctx)
}

// run sets up the workload and measures the phases asked for.
func (b *bench) run(ctx context.Context) error {
	b.header()
	if err := b.createTable(ctx); err != nil {
		return err
	}
	if b.opts.phase("stream") {
		if err := b.streaming(ctx); err != nil {
			return fmt.Errorf("streaming phase: %w", err)
		}
	} else if b.opts.phase("snapshot") {
		if _, err := b.fillTable(ctx); err != nil {
			return err
		}
	}
	if b.opts.phase("snapshot") {
		if err := b.snapshot(ctx); err != nil {
			return fmt.Errorf("snapshot phase: %w", err)
		}
	}
	b.result.print(os.Stdout)
	if b.opts.phase("produce") {
		if err := b.produce(ctx, os.Stdout); err != nil {
			return fmt.Errorf("produce phase: %w", err)
		}
	}
	return nil
}

// deleteTopics deletes every topic whose name starts with the run's base
// name (data topics and walhouse's state topics).
func (b *bench) deleteTopics(ctx context.Context) error {
	return testenv.DeleteTopicsWithPrefix(ctx, b.adm, b.names.base)
}
