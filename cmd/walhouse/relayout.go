package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/walhouse/walhouse/cli"
	"github.com/walhouse/walhouse/clickhouse"
	"github.com/walhouse/walhouse/kafka"
	"github.com/walhouse/walhouse/pipeline"
	"github.com/walhouse/walhouse/record"
	"github.com/walhouse/walhouse/registry"
	"github.com/walhouse/walhouse/schema"
	"github.com/walhouse/walhouse/sink"
)

// runRelayout rebuilds tables in the shape of their layout while the
// sinks keep loading them (clickhouse.Writer.Relayout). The table's
// columns come from where the sink takes them: the newest record of the
// table's topic, whose schema the schema registry holds.
func runRelayout(ctx context.Context, inv *cli.Invocation) error {
	var tables []string
	for len(inv.Args) > 0 && !strings.HasPrefix(inv.Args[0], "-") {
		tables, inv.Args = append(tables, inv.Args[0]), inv.Args[1:]
	}
	fs, ep := cli.NewFlagSet("relayout", cli.UsesKafka|cli.UsesClickHouse|cli.UsesCluster)
	prefix := fs.String("topic-prefix", "walhouse", "topic prefix of the pipeline: the tables' topics are <prefix>.<schema>.<table>, their schemas in <prefix>-schemas")
	partitionBy := fs.String("partition-by", "", "the sink's --partition-by: the default shape of a table without a layout")
	dropOld := fs.Bool("drop-old", false, "drop the old table once the new one is in place, instead of keeping it as _walhouse_old_<table>")
	layouts := cli.RegisterLayout(fs)
	if err := inv.Parse(fs); err != nil {
		return err
	}
	sources, err := relayoutTables(tables, ep.Cluster)
	if err != nil {
		return err
	}
	fps, err := cli.Failpoints()
	if err != nil {
		return err
	}
	kc, err := ep.KafkaConfig()
	if err != nil {
		return err
	}
	conn, err := openClickHouse(ctx, ep)
	if err != nil {
		return err
	}
	defer conn.Close()
	w, err := clickhouse.NewWriter(ctx, conn, ep.Database, *partitionBy, clickhouse.WithLayouts(layouts), clickhouse.WithRelayout(*dropOld), clickhouse.WithFailpoints(fps))
	if err != nil {
		return err
	}
	cl, err := kafka.NewClient(ctx, kc)
	if err != nil {
		return err
	}
	defer cl.Close()
	schemas := registry.NewReader(cl, kafka.SchemasTopic(*prefix), slog.Default())
	for _, src := range sources {
		if err := relayoutOne(ctx, inv, w, kc, schemas, *prefix, src); err != nil {
			return err
		}
	}
	return nil
}

// relayoutTables checks the tables of walhouse relayout: at least one,
// each schema.table and named once, and not on a cluster.
func relayoutTables(args []string, cluster string) ([]record.Source, error) {
	if cluster != "" {
		return nil, cli.Usagef("--cluster %s: walhouse relayout is not supported on a cluster yet; stop the sinks, create the new table ON CLUSTER beside the old one (CREATE TABLE … AS the old, with the new ORDER BY and PARTITION BY), INSERT INTO it SELECT * FROM the old FINAL, EXCHANGE TABLES … ON CLUSTER, then start the sinks (docs/shaping-tables.md#changing-a-layout)", cluster)
	}
	if len(args) == 0 {
		return nil, cli.Usagef("want the tables to relayout, schema.table, before the flags: walhouse relayout public.orders [--drop-old]")
	}
	var (
		out      []record.Source
		problems []error
		seen     = map[string]bool{}
	)
	for _, a := range args {
		s, t, ok := strings.Cut(a, ".")
		switch {
		case !ok || s == "" || t == "":
			problems = append(problems, fmt.Errorf("table %q: want schema.table, e.g. public.orders", a))
		case seen[a]:
			problems = append(problems, fmt.Errorf("table %q is named twice", a))
		default:
			seen[a] = true
			out = append(out, record.Source{Schema: s, Table: t})
		}
	}
	if err := errors.Join(problems...); err != nil {
		return nil, cli.Usage(err)
	}
	return out, nil
}

// relayoutOne relayouts the table of src and says what it did.
func relayoutOne(ctx context.Context, inv *cli.Invocation, w *clickhouse.Writer, kc kafka.Config, schemas *registry.Reader, prefix string, src record.Source) error {
	name := src.Schema + "." + src.Table
	topic := record.TopicName(prefix, src.Schema, src.Table)
	r, err := pipeline.NewestChange(ctx, kc, topic, schemas)
	if err != nil {
		return fmt.Errorf("table %s: %w", name, err)
	}
	if r == nil {
		return fmt.Errorf("table %s is unknown to walhouse: its topic %s holds no change of it; check the table's name and --topic-prefix, and that capture streams it (--tables)", name, topic)
	}
	src.ID = r.Source.ID
	start := time.Now()
	res, err := w.Relayout(ctx, src, record.Schema{TenantColumn: r.TenantColumn, Columns: r.Columns})
	var terr *sink.TableError
	switch {
	case errors.Is(err, clickhouse.ErrNoTable):
		return fmt.Errorf("table %s: %w", name, err)
	case errors.As(err, &terr):
		return err // it names the fix
	case err != nil:
		return fmt.Errorf("table %s: %w (run walhouse relayout again: it goes on from where it stopped)", name, err)
	case !res.Changed:
		fmt.Fprintf(inv.Stdout, "%s: already in its layout (ORDER BY %s, PARTITION BY %s); nothing to do\n", name, strings.Join(res.NewSortingKey, ", "), orNone(res.NewPartitionKey))
		return nil
	case res.Resumed:
		fmt.Fprintf(inv.Stdout, "%s: finished a relayout interrupted after its swap: ORDER BY %s, PARTITION BY %s%s", name, strings.Join(res.NewSortingKey, ", "), orNone(res.NewPartitionKey), retyped(res.Retyped))
	default:
		fmt.Fprintf(inv.Stdout, "%s: relayouted from ORDER BY %s, PARTITION BY %s to ORDER BY %s, PARTITION BY %s%s: %d rows copied, %d parts caught up, in %s",
			name, strings.Join(res.SortingKey, ", "), orNone(res.PartitionKey), strings.Join(res.NewSortingKey, ", "), orNone(res.NewPartitionKey),
			retyped(res.Retyped), res.Rows, res.CaughtUp, time.Since(start).Round(time.Millisecond))
	}
	if res.Clamped > 0 {
		fmt.Fprintf(inv.Stdout, "; %d values beyond a narrowed column's range stored as its bound (on_overflow clamp)", res.Clamped)
	}
	if res.Old != "" {
		fmt.Fprintf(inv.Stdout, "; the old table is kept as %s (drop it once checked, e.g. by walhouse verify)\n", res.Old)
	} else {
		fmt.Fprintln(inv.Stdout, "; the old table is dropped")
	}
	return nil
}

// retyped says which columns a relayout gave another type ("" none).
func retyped(rs []schema.Retype) string {
	if len(rs) == 0 {
		return ""
	}
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.String()
	}
	return ", with column " + strings.Join(out, ", column ")
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}
