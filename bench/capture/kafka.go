package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walhouse/walhouse/record"
)

// The produce phase measures Kafka alone: records shaped like the
// snapshot's (the benchmark table's columns and values, encoded by
// record.Encoder beforehand) produced as fast as the client can, once per
// compression codec. It shows what the broker costs per record, and so how
// fast any capture could be on this machine, independently of PostgreSQL.

// produceRun is one codec's figures.
type produceRun struct {
	codec    string
	records  int
	took     time.Duration
	bytes    int64   // encoded keys and values
	cpu      float64 // CPU seconds of this process's producing
	services serviceCPU
}

// codecs are the producer compressions compared, as kgo options.
var codecs = []struct {
	name  string
	codec kgo.CompressionCodec
}{
	{"lz4", kgo.Lz4Compression()},
	{"snappy", kgo.SnappyCompression()},
	{"zstd (fastest)", kgo.ZstdCompression().WithLevel(1)},
	{"none", kgo.NoCompression()},
}

// produce runs the produce phase and prints its table.
func (b *bench) produce(ctx context.Context, w io.Writer) error {
	keys, values := snapshotLikeRecords(20_000)
	var runs []produceRun
	for i, c := range codecs {
		topic := b.names.topicPrefix("produce") + "_" + strconv.Itoa(i)
		if resp, err := b.adm.CreateTopic(ctx, 6, -1, nil, topic); err != nil || resp.Err != nil {
			return fmt.Errorf("create topic %s: %v %v", topic, err, resp.Err)
		}
		stop, err := b.startProfile("produce-" + strings.Fields(c.name)[0])
		if err != nil {
			return err
		}
		run, err := b.produceOnce(ctx, topic, c.codec, keys, values)
		if perr := stop(); err == nil {
			err = perr
		}
		if err != nil {
			return fmt.Errorf("produce with %s: %w", c.name, err)
		}
		run.codec = c.name
		runs = append(runs, run)
	}
	fmt.Fprintf(w, "\nproduce: %d snapshot-shaped records per codec, pre-encoded, straight into Kafka (no PostgreSQL)\n", b.opts.rows)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "codec\trecords/s\tMB/s in\tCPU s: producer\tkafka\ttotal\tµs CPU per record\t")
	for _, r := range runs {
		total := r.cpu + r.services.kafka
		fmt.Fprintf(tw, "%s\t%.0f\t%.0f\t%.1f\t%.1f\t%.1f\t%.1f\t\n", r.codec, float64(r.records)/r.took.Seconds(),
			float64(r.bytes)/(1<<20)/r.took.Seconds(), r.cpu, r.services.kafka, total, total/float64(r.records)*1e6)
	}
	return tw.Flush()
}

// produceOnce produces opts.rows records to topic with one codec and
// waits for all of them to be acknowledged.
func (b *bench) produceOnce(ctx context.Context, topic string, codec kgo.CompressionCodec, keys, values [][]byte) (produceRun, error) {
	opts := append(producerOpts(b.opts.brokers), kgo.ProducerBatchCompression(codec, kgo.NoCompression()))
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return produceRun{}, err
	}
	defer cl.Close()
	if err := cl.Ping(ctx); err != nil {
		return produceRun{}, err
	}
	run := produceRun{records: b.opts.rows}
	failed := make(chan error, 1)
	promise := func(_ *kgo.Record, err error) {
		if err != nil {
			select {
			case failed <- err:
			default:
			}
		}
	}
	cpu0, svc0, start := selfCPU(), readServiceCPU(b.opts.localDir), time.Now()
	for i := 0; i < b.opts.rows; i++ {
		k, v := keys[i%len(keys)], values[i%len(values)]
		run.bytes += int64(len(k) + len(v))
		cl.Produce(ctx, &kgo.Record{Topic: topic, Key: k, Value: v}, promise)
	}
	if err := cl.Flush(ctx); err != nil {
		return run, err
	}
	run.took, run.cpu, run.services = time.Since(start), selfCPU()-cpu0, readServiceCPU(b.opts.localDir).sub(svc0)
	select {
	case err := <-failed:
		return run, err
	default:
	}
	ends, err := b.adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return run, err
	}
	var n int64
	ends.Each(func(o kadm.ListedOffset) { n += o.Offset })
	if n != int64(b.opts.rows) {
		return run, fmt.Errorf("topic %s holds %d records, want %d", topic, n, b.opts.rows)
	}
	return run, nil
}

// snapshotLikeRecords encodes n distinct records with the benchmark table's
// shape and values (see fillTable), as the snapshot would.
func snapshotLikeRecords(n int) (keys, values [][]byte) {
	cols := []record.Column{
		{Name: "tenant_id", Type: "text", TypMod: -1, Key: true, Attnum: 1},
		{Name: "id", Type: "int8", TypMod: -1, Key: true, Attnum: 2},
		{Name: "amount", Type: "numeric", TypMod: 786438, Attnum: 3},
		{Name: "note", Type: "text", TypMod: -1, Attnum: 4},
		{Name: "created_at", Type: "timestamptz", TypMod: -1, Attnum: 5},
		{Name: "attrs", Type: "jsonb", TypMod: -1, Attnum: 6},
	}
	src := record.Source{ID: "7441234567890123456/walhouse", Schema: "public", Table: "bench"}
	enc := record.NewEncoder(src, "tenant_id", cols, record.SchemaID("tenant_id", cols), record.EnvelopeVersion)
	at := time.Now().UTC()
	values = make([][]byte, n)
	keys = make([][]byte, n)
	vals := make([]record.Value, len(cols))
	for g := 1; g <= n; g++ {
		id := strconv.Itoa(g)
		vals[0] = record.Value{Text: "tenant_" + strconv.Itoa(g%50)}
		vals[1] = record.Value{Text: id}
		vals[2] = record.Value{Text: strconv.FormatFloat(float64(g%1000000)/100, 'f', 2, 64)}
		vals[3] = record.Value{Text: fmt.Sprintf("note %032x", uint64(g)*0x9E3779B97F4A7C15)}
		vals[4] = record.Value{Text: time.Date(2024, 1, 1, 0, 0, g, 0, time.UTC).Format("2006-01-02 15:04:05+00")}
		vals[5] = record.Value{Text: `{"g": ` + id + `, "ok": ` + strconv.FormatBool(g%2 == 0) + `, "tag": "k` + strconv.Itoa(g%7) + `"}`}
		r := record.Record{
			OccurredAt: at, IngestedAt: at.Add(time.Duration(g) * time.Microsecond), TenantID: vals[0].Text, TenantColumn: "tenant_id",
			Source: src, LSN: 0x1A2B3C4D, CommitLSN: 0x1A2B3C4D, Op: record.Read, Columns: cols, SchemaID: record.SchemaID("tenant_id", cols), Values: vals,
		}
		r.EventID = record.SnapshotEventID(src.ID, r.CommitLSN, "public.bench", []string{vals[0].Text, id}, at)
		_, k, v := enc.AppendKeyValue(nil, &r)
		keys[g-1], values[g-1] = k, v
	}
	return keys, values
}

// startProfile starts a CPU profile into <profile dir>/<name>-cpu.pprof
// when -profile is set; stop ends it.
func (b *bench) startProfile(name string) (stop func() error, err error) {
	if b.opts.profileDir == "" {
		return func() error { return nil }, nil
	}
	if err := os.MkdirAll(b.opts.profileDir, 0o755); err != nil {
		return nil, fmt.Errorf("profile directory: %w", err)
	}
	f, err := os.Create(filepath.Join(b.opts.profileDir, name+"-cpu.pprof"))
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("start the CPU profile: %w", err)
	}
	return func() error { pprof.StopCPUProfile(); return f.Close() }, nil
}

// selfCPU returns the CPU seconds this process has used.
func selfCPU() float64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}
