package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walhouse/walhouse/capture"
	"github.com/walhouse/walhouse/internal/kafkatopic"
)

// kafkaClient opens a franz-go client and checks that a broker answers, so
// a wrong address fails at start with a clear message instead of retrying
// silently.
func kafkaClient(ctx context.Context, kc kafkaConfig, opts ...kgo.Opt) (*kgo.Client, error) {
	brokers := kc.brokers
	if len(brokers) == 0 {
		return nil, fmt.Errorf("no Kafka brokers given: set --kafka or WALHOUSE_KAFKA_BROKERS")
	}
	all := append([]kgo.Opt{kgo.SeedBrokers(brokers...)}, kc.security...)
	cl, err := kgo.NewClient(append(all, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("kafka client: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := cl.Ping(pctx); err != nil {
		cl.Close()
		if errors.Is(err, kerr.SaslAuthenticationFailed) {
			return nil, fmt.Errorf("log in to Kafka at %v: %w; check --kafka-sasl-user and the password", brokers, err)
		}
		// An unknown CA (a private one, as self-managed clusters use) or a
		// name the certificate does not cover: retrying never fixes either.
		if certificateError(err) {
			return nil, fmt.Errorf("connect to Kafka at %v over TLS: %w; the broker's certificate did not verify: give the CA that signed it with --kafka-tls-ca (env WALHOUSE_KAFKA_TLS_CA), and name the brokers in --kafka as their certificate does", brokers, err)
		}
		return nil, fmt.Errorf("reach Kafka at %v: %w; check that the broker runs, that --kafka is right and whether it needs --kafka-tls or --kafka-sasl", brokers, err)
	}
	return cl, nil
}

// producerOpts are the producer settings capture uses: idempotent (the
// franz-go default, with acks from all in-sync replicas), compressed, with a
// short linger so rows are batched without adding visible latency, sized
// for records of up to maxRecordBytes (see recordLimitOpts).
//
// Compression is snappy (franz-go's S2 encoder in its snappy form): it costs
// walhouse about a quarter of what lz4 does per byte, and walhouse plus the
// broker spend less CPU in total per record than with lz4, zstd or none
// (make bench-capture with -phases produce compares them), for batches
// about 40% larger than lz4's. A record is mostly repeated envelope (field
// names, source, schemaId), which every codec compresses several times.
//
// During a snapshot the producer is saturated, so batches fill up to the
// batch limit (recordLimitOpts) or the buffer, whichever is smaller; the
// linger only matters for the trickle of streamed changes, where it bounds
// the added latency.
func producerOpts(maxRecordBytes int) []kgo.Opt {
	return append(recordLimitOpts(maxRecordBytes),
		kgo.RecordPartitioner(capture.Partitioner()),
		kgo.ProducerBatchCompression(kgo.SnappyCompression(), kgo.NoCompression()),
		kgo.ProducerLinger(5*time.Millisecond),
		kgo.MaxBufferedRecords(100_000),
		// Bounds memory when the broker is slower than PostgreSQL; a
		// record at the bound must fit, or the client refuses it.
		kgo.MaxBufferedBytes(max(48<<20, kafkatopic.MaxMessageBytes(maxRecordBytes))),
		kgo.RecordDeliveryTimeout(0), // retry until acknowledged; capture's own bound pauses reading
		// A topic capture has just created is often unknown to the first
		// metadata answer; the default 5 s between metadata queries then
		// stalls its first records for up to 5 s.
		kgo.MetadataMinAge(250*time.Millisecond),
	)
}

// Request sizes franz-go and Kafka use unless told otherwise: a fetch
// response aims at fetchMaxBytes, and neither side reads or writes a
// request over defaultRequestBytes (the broker's socket.request.max.bytes).
const (
	fetchMaxBytes       = 50 << 20
	defaultRequestBytes = 100 << 20
)

// recordLimitOpts size a client for records of up to maxRecordBytes of key
// and value, the bound capture enforces (--max-record-bytes): the topics
// walhouse creates hold MaxMessageBytes, and so must every client that
// produces to them (capture, the sink's dead letters, dlq replay) and
// every client that reads them.
//
//   - A batch holds up to MaxMessageBytes before compression (franz-go
//     refuses a larger record outright, and sends a batch uncompressed
//     when compression does not shrink it, so the topic's limit, checked
//     after compression, holds too).
//   - A fetch returns at least one whole batch even when it is larger than
//     the fetch limits (Kafka's KIP-74), so a large record never stalls a
//     consumer; the response is then larger than fetchMaxBytes, and the
//     client must be willing to read it (BrokerMaxReadBytes).
//   - Requests stay at the broker's 100 MiB default unless one record
//     needs more; a bound above about 98 MiB needs the brokers'
//     socket.request.max.bytes raised to match (README, Known limits).
func recordLimitOpts(maxRecordBytes int) []kgo.Opt {
	batch := kafkatopic.MaxMessageBytes(maxRecordBytes)
	request := max(defaultRequestBytes, batch+kafkatopic.Overhead)
	return []kgo.Opt{
		kgo.ProducerBatchMaxBytes(int32(batch)),
		kgo.BrokerMaxWriteBytes(int32(request)),
		kgo.FetchMaxBytes(fetchMaxBytes),
		kgo.BrokerMaxReadBytes(int32(min(fetchMaxBytes+request, math.MaxInt32))),
	}
}

// maxRecordBytesFlag registers --max-record-bytes on fs: the commands that
// produce or read the tables' topics must agree on it.
func maxRecordBytesFlag(fs *flag.FlagSet) *int {
	return fs.Int("max-record-bytes", envInt("WALHOUSE_MAX_RECORD_BYTES", kafkatopic.DefaultMaxRecordBytes),
		"largest Kafka record (key plus value) a row may become, in bytes; capture dead-letters larger rows, and the topics walhouse creates or finds get a max.message.bytes that holds it (env WALHOUSE_MAX_RECORD_BYTES)")
}
